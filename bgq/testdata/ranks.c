/* A rank of the emulated Blue Gene/Q tests: calls work twice with its rank + 40 and + 41,
 * or, given an argument, forever (ten times a second), saying so after each of the first
 * three calls of the loop. It handles SIGUSR1, the signal a CNK agent under QEMU >= 9 can be
 * told to interrupt it with.
 *
 * With the arguments "fast N" it runs the no-op at fast_nop N times, says how many times
 * trap_handler ran, calls work once, runs fast_nop N times again and says so once more:
 * trap_handler is a SIGTRAP handler the program never installs itself (a tool does, with
 * InstallTrapHandler); it counts a trap and moves the interrupted IAR past it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
volatile long total, handled;
static void on_usr1(int s) { (void)s; }
__attribute__((noinline)) long work(long x) {
	total += x;
	return total * 2;
}
void trap_handler(int sig, siginfo_t *si, void *ctx) {
	(void)sig;
	(void)si;
	handled++;
	((ucontext_t *)ctx)->uc_mcontext.gp_regs[32] += 4; /* PT_NIP */
}
__attribute__((noinline)) void fast_site(void) { __asm__ volatile(".globl fast_nop\nfast_nop: nop"); }
static int fast(long rank, long n) {
	for (long i = 0; i < n; i++)
		fast_site();
	printf("rank %ld fast %ld handled %ld\n", rank, n, handled);
	fflush(stdout);
	work(rank);
	for (long i = 0; i < n; i++)
		fast_site();
	printf("rank %ld then handled %ld\n", rank, handled);
	fflush(stdout);
	return 0;
}
int main(int argc, char **argv) {
	signal(SIGUSR1, on_usr1);
	const char *r = getenv("HPCDAP_RANK");
	long rank = r ? atol(r) : -1, sum = 0;
	if (argc > 2 && strcmp(argv[1], "fast") == 0)
		return fast(rank, atol(argv[2]));
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
