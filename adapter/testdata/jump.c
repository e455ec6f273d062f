#include <stdio.h>

static int twice(int x)
{
	return 2 * x; /* MARK:twice-body */
}

int main(void)
{
	volatile int a = 1;
	a = a + 10; /* MARK:jump-skipped */
	a = a * 3; /* MARK:jump-to */
	a = twice(a); /* MARK:jump-call */
	printf("%d\n", a); /* MARK:jump-end */
	return 0;
}
