/* A hot loop for the conditional-breakpoint benchmark: f is called 20,000 times (or as many
 * times as the first argument says). */
#include <stdio.h>
#include <stdlib.h>

volatile long sink;

void f(int i)
{
	sink += i; /* MARK:f-body */
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000;
	for (int i = 0; i < n; i++)
		f(i); /* MARK:main-call */
	printf("sink %ld\n", sink);
	return 0;
}
