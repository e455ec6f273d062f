/* Test program for package ptrace. The first argument selects what it does. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile long counter;
volatile int watched;
volatile int sink;
volatile sig_atomic_t got_usr1;
volatile int release_threads;
volatile int started_threads;
unsigned char big_buffer[1 << 20];

__attribute__((noinline)) void target_fn(long i) { counter += i; }

__attribute__((noinline)) void store_watched(int v) { watched = v; }

__attribute__((noinline)) int load_watched(void) { return watched; }

__attribute__((noinline)) long regs_fn(long a, long b, long c, long d, long e, long f, double x) {
	return a + b + c + d + e + f + (long)x;
}

__attribute__((noinline)) void all_started(void) { sink++; }

__attribute__((noinline)) long raw_getpid(void) {
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory");
	return r;
}

static void on_usr1(int sig) { (void)sig; got_usr1 = 1; }

static void pause_ms(int ms) {
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static void *worker(void *arg) {
	(void)arg;
	__sync_fetch_and_add(&started_threads, 1);
	while (!release_threads)
		pause_ms(1);
	return NULL;
}

static void *churner(void *arg) {
	(void)arg;
	return NULL;
}

static void *spinner(void *arg) {
	long n = (long)arg; /* n < 0: forever */
	for (long i = 0; n < 0 || i < n; i++)
		target_fn(1);
	return NULL;
}

static void *idler(void *arg) {
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static int clone_child(void *arg) {
	(void)arg;
	return 9;
}

static void *exit_later(void *arg) {
	(void)arg;
	pause_ms(30);
	exit(5);
}

static char *exec_path;

static void *exec_thread(void *arg) {
	(void)arg;
	char *argv[] = {exec_path, "exit", "7", NULL};
	execv(exec_path, argv);
	_exit(99);
}

volatile long tight_counter;

/* An endless loop of a few instructions and no call. */
__attribute__((noinline)) void tight(void) {
	for (;;)
		tight_counter++;
}

/* vzeroupper right before a call, as gcc emits it at the end of AVX code, in an endless loop:
 * the callee counts the calls. */
__attribute__((noinline, used)) void vzero_callee(void) { tight_counter++; }

__attribute__((noinline)) void vzero_loop(void) {
	for (;;)
		__asm__ volatile("nop; nop; nop; vzeroupper; call vzero_callee"
				 ::: "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "memory", "cc");
}

/* A jump to itself, for ever. */
__attribute__((noinline)) void jump_self(void) { __asm__ volatile("1: jmp 1b"); }

/* An endless loop of 40 no-ops and a store. */
__attribute__((noinline)) void nops(void) {
	for (;;) {
		__asm__ volatile(".rept 40\n\tnop\n\t.endr");
		tight_counter++;
	}
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "count";
	long n = argc > 2 ? atol(argv[2]) : 3;
	if (!strcmp(mode, "tight")) /* loop in tight() for ever */
		tight();
	if (!strcmp(mode, "vzero")) /* loop in vzero_loop() for ever */
		vzero_loop();
	if (!strcmp(mode, "jumpself")) /* jump to the same jump for ever */
		jump_self();
	if (!strcmp(mode, "nops")) /* loop in nops() for ever */
		nops();
	if (!strcmp(mode, "count")) { /* call target_fn n times; n < 0: forever */
		for (long i = 0; n < 0 || i < n; i++)
			target_fn(1);
		return counter == n ? 0 : 1;
	}
	if (!strcmp(mode, "syscall"))
		return raw_getpid() == getpid() ? 0 : 1;
	if (!strcmp(mode, "exit"))
		return (int)n;
	if (!strcmp(mode, "watch")) {
		store_watched(7);
		sink = load_watched();
		store_watched(8);
		return watched == 8 ? 0 : 1;
	}
	if (!strcmp(mode, "regs")) {
		long r = regs_fn(11, 22, 33, 44, 55, 66, 7.5);
		return r == 238 ? 0 : r == 300 ? 4 : 1;
	}
	if (!strcmp(mode, "sigusr")) { /* say ready, exit 42 once SIGUSR1 has been handled */
		signal(SIGUSR1, on_usr1);
		if (write(1, "ready\n", 6) != 6)
			return 1;
		while (!got_usr1) {
			target_fn(0);
			store_watched(0);
		}
		return 42;
	}
	if (!strcmp(mode, "threads")) { /* start n workers, call all_started, let them finish */
		pthread_t t[64];
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, worker, NULL);
		while (started_threads < n)
			pause_ms(1);
		all_started();
		release_threads = 1;
		for (long i = 0; i < n; i++)
			pthread_join(t[i], NULL);
		return 0;
	}
	if (!strcmp(mode, "run")) { /* run for about n ms with two spinning threads, exit 3 */
		pthread_t a, b;
		pthread_create(&a, NULL, worker, NULL);
		pthread_create(&b, NULL, worker, NULL);
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do {
			target_fn(1);
			clock_gettime(CLOCK_MONOTONIC, &t1);
		} while ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < n);
		release_threads = 1;
		pthread_join(a, NULL);
		pthread_join(b, NULL);
		return 3;
	}
	if (!strcmp(mode, "create")) { /* create and join n short threads, one after another */
		for (long i = 0; i < n; i++) {
			pthread_t t;
			pthread_create(&t, NULL, churner, NULL);
			pthread_join(t, NULL);
		}
		return 0;
	}
	if (!strcmp(mode, "churn")) { /* create and join short threads for about n ms, exit 0 */
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do {
			pthread_t t;
			pthread_create(&t, NULL, churner, NULL);
			pthread_join(t, NULL);
			clock_gettime(CLOCK_MONOTONIC, &t1);
		} while ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < n);
		return 0;
	}
	if (!strcmp(mode, "spin")) { /* n threads calling target_fn forever */
		pthread_t t;
		for (long i = 1; i < n; i++)
			pthread_create(&t, NULL, spinner, (void *)-1L);
		spinner((void *)-1L);
		return 0;
	}
	if (!strcmp(mode, "idle")) { /* n threads blocked in pause() */
		pthread_t t;
		for (long i = 1; i < n; i++)
			pthread_create(&t, NULL, idler, NULL);
		for (;;)
			pause();
	}
	if (!strcmp(mode, "leaderexit")) { /* the leader leaves first; a thread then exits 5 */
		pthread_t t;
		pthread_create(&t, NULL, exit_later, NULL);
		pthread_exit(NULL);
	}
	if (!strcmp(mode, "clonechild")) { /* a new process made by clone with exit signal SIGUSR2 */
		static char stack[1 << 16];
		int st;
		signal(SIGUSR2, on_usr1);
		int pid = clone(clone_child, stack + sizeof stack, SIGUSR2, NULL);
		if (pid < 0 || waitpid(pid, &st, __WALL) != pid)
			return 1;
		return WIFEXITED(st) && WEXITSTATUS(st) == 9 ? 0 : 2;
	}
	if (!strcmp(mode, "exec")) { /* execv(argv[2], {argv[2], "exit", "7"}) */
		char *args[] = {argv[2], "exit", "7", NULL};
		execv(argv[2], args);
		return 98;
	}
	if (!strcmp(mode, "threadexec")) { /* a second thread calls execv while a third waits */
		pthread_t a, b;
		exec_path = argv[2];
		pthread_create(&a, NULL, worker, NULL);
		pthread_create(&b, NULL, exec_thread, NULL);
		pthread_join(b, NULL);
		return 97;
	}
	if (!strcmp(mode, "stopme")) { /* stop itself with SIGSTOP, then exit 5 once continued */
		raise(SIGSTOP);
		return 5;
	}
	fprintf(stderr, "prog: unknown mode %s\n", mode);
	return 2;
}
