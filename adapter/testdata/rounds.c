/* A rank that calls first() and second() in turn for $ROUNDS rounds and exits 0: the shared
 * session tests set one breakpoint in each, from two clients. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int first(int v)
{
	return v + 1; /* MARK:first */
}

__attribute__((noinline)) int second(int v)
{
	return v + 2; /* MARK:second */
}

int main(void)
{
	const char *r = getenv("ROUNDS");
	int n = r ? atoi(r) : 3, sum = 0;
	for (int i = 0; i < n; i++) {
		sum += first(i);
		sum += second(i);
	}
	printf("sum %d\n", sum);
	return 0;
}
