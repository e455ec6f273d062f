/* A rank of the emulated Blue Gene/Q tests: calls work twice with its rank + 40 and + 41,
 * or, given an argument, forever (ten times a second), saying so after each of the first
 * three calls of the loop. It handles SIGUSR1, the signal a CNK agent under QEMU >= 9 can be
 * told to interrupt it with. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
volatile long total;
static void on_usr1(int s) { (void)s; }
__attribute__((noinline)) long work(long x) {
	total += x;
	return total * 2;
}
int main(int argc, char **argv) {
	signal(SIGUSR1, on_usr1);
	const char *r = getenv("HPCDAP_RANK");
	long rank = r ? atol(r) : -1, sum = 0;
	for (int i = 0; i < 2; i++)
		sum += work(rank + 40 + i);
	printf("rank %ld sum %ld\n", rank, sum);
	fflush(stdout);
	for (long tick = 1; argc > 1; tick++) {
		work(rank);
		if (tick <= 3) {
			printf("rank %ld tick %ld\n", rank, tick);
			fflush(stdout);
		}
		usleep(100000);
	}
	return 0;
}
