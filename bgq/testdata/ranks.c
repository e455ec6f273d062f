/* A rank of the emulated Blue Gene/Q tests: calls work twice with its rank + 40 and + 41. */
#include <stdio.h>
#include <stdlib.h>
volatile long total;
__attribute__((noinline)) long work(long x) {
	total += x;
	return total * 2;
}
int main(void) {
	const char *r = getenv("HPCDAP_RANK");
	long rank = r ? atol(r) : -1, sum = 0;
	for (int i = 0; i < 2; i++)
		sum += work(rank + 40 + i);
	printf("rank %ld sum %ld\n", rank, sum);
	return 0;
}
