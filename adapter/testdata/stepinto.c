/* Step-in targets: one line makes three calls. Lines marked "MARK:name" are found by the
 * tests. */
#include <stdio.h>

static int g(int x)
{
	return x + 10; /* MARK:g */
}

static int h(int x)
{
	return x * 20; /* MARK:h */
}

static int f(int a, int b)
{
	return a - b; /* MARK:f */
}

int main(void)
{
	int r = f(g(1), h(2)); /* MARK:calls */
	r += f(g(3), h(4));    /* MARK:again */
	printf("%d\n", r);
	return 0;
}
