/* ool: runs each instruction of oolkinds.S n times and prints what they computed.
 *   ool kinds N         every kind N times
 *   ool threads T N     T threads call k_bump N times each; each counts its own calls
 *   ool fork N          kinds N times, then a child execs "ool kinds N" and the parent runs
 *                       kinds N times more and waits for it
 *   ool exec N          kinds N times, then execs "ool kinds N"
 *   ool wait N          kinds N times once a byte can be read from stdin, and ends once a
 *                       second one can (its memory can be read until then)
 *   ool signals N       kinds N times under a 2 ms interval timer whose SIGALRM handler
 *                       checks k_branch and k_sse itself, until its MAX_TICKS-th signal */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

long counter, calls, total;
const long table[4] = {11, 22, 33, 44};
const double half = 0.5;

long leaf(long x)
{
	calls++;
	return x * 3 + 1;
}

long (*fptr)(long) = leaf;

long k_load(long i);
void k_store(long v);
long k_call(long x);
long k_branch(long x);
double k_sse(double x);
long k_getpid(void);
void k_bump(long t, long i);

static void kinds(long n)
{
	long sum = 0, bad = 0;
	double d = 0;
	for (long i = 0; i < n; i++) {
		k_store(i);
		sum += k_load(i);
		sum += k_call(i % 1000);
		sum += k_branch(i % 50);
		d += k_sse((double)(i % 7));
		if (k_getpid() != getpid())
			bad++;
	}
	printf("kinds %ld: counter %ld calls %ld sum %ld sse %.1f bad %ld\n", n, counter, calls, sum, d, bad);
	fflush(stdout);
}

static volatile long ticks, handler_bad;

/* The timer counts real time: without a bound, a traced run that goes slowly (a loaded
 * machine) takes more signals the slower it goes, each with stops of its own, until the
 * handler's stops fill the 2 ms between signals and the loop hardly advances. */
#define MAX_TICKS 500

static void tick(int sig)
{
	(void)sig;
	if (ticks == MAX_TICKS - 1) {
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, NULL);
	}
	long x = ticks++ % 50;
	if (k_branch(x) != ((x & 1 ? x * 10 : x + 7) < 100 ? (x & 1 ? x * 10 : x + 7) : (x & 1 ? x * 10 : x + 7) - 100))
		handler_bad++;
	if (k_sse(2.0) != 3.0)
		handler_bad++;
}

static long per;
static long counts[64];

static void *worker(void *arg)
{
	long t = (long)arg;
	for (long i = 0; i < per; i++) {
		k_bump(t, i);
		counts[t]++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "threads") == 0 && argc == 4) {
		long nt = atol(argv[2]);
		per = atol(argv[3]);
		pthread_t th[64];
		if (nt < 1 || nt > 64)
			return 2;
		for (long t = 0; t < nt; t++)
			pthread_create(&th[t], NULL, worker, (void *)t);
		for (long t = 0; t < nt; t++)
			pthread_join(th[t], NULL);
		for (long t = 0; t < nt; t++)
			printf("thread %ld: %ld\n", t, counts[t]);
		printf("total %ld\n", total);
		return 0;
	}
	if (argc != 3)
		return 2;
	long n = atol(argv[2]);
	if (strcmp(argv[1], "signals") == 0) {
		struct sigaction sa = {.sa_handler = tick, .sa_flags = SA_RESTART};
		sigaction(SIGALRM, &sa, NULL);
		struct itimerval it = {{0, 2000}, {0, 2000}};
		setitimer(ITIMER_REAL, &it, NULL);
		kinds(n);
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, NULL);
		printf("handler bad %ld\nticks %ld\n", handler_bad, ticks);
		return 0;
	}
	if (strcmp(argv[1], "wait") == 0) {
		char c;
		if (read(0, &c, 1) != 1)
			return 3;
	}
	kinds(n);
	if (strcmp(argv[1], "exec") == 0) {
		execl("/proc/self/exe", argv[0], "kinds", argv[2], (char *)NULL);
		perror("exec");
		return 1;
	}
	if (strcmp(argv[1], "fork") == 0) {
		pid_t c = fork();
		if (c == 0) {
			execl("/proc/self/exe", argv[0], "kinds", argv[2], (char *)NULL);
			_exit(127);
		}
		kinds(n);
		int st;
		waitpid(c, &st, 0);
		printf("child %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	if (strcmp(argv[1], "wait") == 0) {
		char c;
		fflush(stdout);
		if (read(0, &c, 1) != 1)
			return 3;
	}
	return 0;
}
