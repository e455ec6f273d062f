/* A rank that says three things on stdout and on stderr, one round at a time, each round
 * passing a line a breakpoint can stop at, and then ends. Its rank is in the lines. */
#include <stdio.h>
#include <stdlib.h>

volatile int said;

int main(void)
{
	const char *r = getenv("HPCDAP_RANK");
	int rank = r ? atoi(r) : 0;
	for (int k = 0; k < 3; k++) {
		printf("rank %d says %d\n", rank, k);
		fflush(stdout);
		fprintf(stderr, "rank %d warns %d\n", rank, k);
		said = k; /* MARK:said */
	}
	return 0;
}
