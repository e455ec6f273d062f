/* Test program of the BG/Q sessions: a static big-endian Power program, one process per rank,
 * run under QEMU by agents that answer as a BG/Q CNK. It handles SIGUSR1, the signal the
 * agents interrupt it with (QEMU >= 9 ignores a debugger's interrupt request and dies of a
 * signal the program does not handle), and with READY_DIR set the ranks wait for each other
 * once every one handles it, so that no rank is stopped before. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
volatile int release;
volatile long spins;
double scale = 1.5;
static void on_usr1(int s) { (void)s; }
/* mark creates dir/name-rank. */
static void mark(const char *dir, const char *name, long rank) {
	char path[512];
	snprintf(path, sizeof path, "%s/%s-%ld", dir, name, rank);
	close(open(path, O_CREAT | O_WRONLY, 0644));
}
/* barrier returns once every rank has marked "start". */
static void barrier(const char *dir, long rank, long np) {
	mark(dir, "start", rank);
	for (long r = 0; r < np; r++) {
		char path[512];
		snprintf(path, sizeof path, "%s/start-%ld", dir, r);
		while (access(path, F_OK) != 0)
			usleep(1000);
	}
}
__attribute__((noinline)) long leaf(long rank, long x) {
	double f = scale * (double)(x + rank);
	long y = x * 3 + rank + (long)f; /* MARK:leaf */
	return y + 1;
}
__attribute__((noinline)) long middle(long rank, long x) { return leaf(rank, x + 1) + 1; }
int main(void) {
	signal(SIGUSR1, on_usr1);
	const char *e = getenv("HPCDAP_RANK"), *n = getenv("HPCDAP_NP"), *dir = getenv("READY_DIR");
	long rank = e ? atol(e) : 0;
	if (dir)
		barrier(dir, rank, n ? atol(n) : 1);
	long r = middle(rank, 10 * rank + 1);
	if (dir)
		mark(dir, "spin", rank);
	while (!release) /* MARK:spin */
		spins++;
	printf("rank %ld: %ld\n", rank, r);
	return (int)(r % 7);
}
