/* Test program for the agent: one thread, modes chosen by argv[1]. Built -O0 with frame
   pointers and without PIE so that nm and objdump give run-time addresses. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long counter;
volatile int watched;
volatile int spin = 1;
char *volatile block; /* a heap allocation, so that the process has a [heap] */

__attribute__((noinline)) void hit(long i) { counter += i; }

__attribute__((noinline)) void poke(int v) { watched = v; }

__attribute__((noinline)) int peek(void) { return watched; }

__attribute__((noinline)) void inner(long i) { hit(i); }

/* An endless loop of a few instructions and no call. */
__attribute__((noinline)) void tight(void) {
	for (;;)
		counter++;
}

static void on_usr1(int sig) {
	(void)sig;
	static const char msg[] = "got SIGUSR1\n";
	write(1, msg, sizeof msg - 1);
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "loop";
	setvbuf(stdout, NULL, _IONBF, 0);
	block = malloc(4000);
	if (strcmp(mode, "tight") == 0)
		tight();
	if (strcmp(mode, "loop") == 0) {
		long n = argc > 2 ? atol(argv[2]) : 10;
		for (long i = 0; i < n; i++)
			inner(i);
		printf("iterations %ld counter %ld\n", n, (long)counter);
		return 0;
	}
	if (strcmp(mode, "watch") == 0) {
		poke(1);
		poke(2);
		printf("watched %d\n", watched);
		return 0;
	}
	if (strcmp(mode, "rwatch") == 0) {
		poke(5);         /* a write: not seen by a read watchpoint */
		int v = peek();  /* the read */
		printf("peeked %d\n", v);
		return 0;
	}
	if (strcmp(mode, "signal") == 0) {
		signal(SIGUSR1, on_usr1);
		printf("ready\n");
		hit(1); /* the test stops here and sends SIGUSR1 */
		printf("done\n");
		return 0;
	}
	if (strcmp(mode, "run") == 0) {
		/* Runs until killed: calls hit() about every millisecond. */
		printf("pid %d\n", getpid());
		for (long i = 0; spin; i++) {
			inner(i);
			usleep(1000);
		}
		return 0;
	}
	if (strcmp(mode, "exec") == 0) {
		/* Replaces itself with a run of the loop. */
		execl(argv[0], argv[0], "loop", "2", (char *)NULL);
		perror("execl");
		return 3;
	}
	if (strcmp(mode, "rank") == 0) {
		const char *r = getenv("HPCDAP_RANK");
		const char *np = getenv("HPCDAP_NP");
		hit(1);
		return (r ? atoi(r) : 100) + (np ? 0 : 100);
	}
	if (strcmp(mode, "fork") == 0) {
		/* A child that exits 7; the parent reports its status. */
		pid_t c = fork();
		if (c == 0)
			_exit(7);
		int st = 0;
		waitpid(c, &st, 0);
		printf("child %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		return 0;
	}
	fprintf(stderr, "unknown mode %s\n", mode);
	return 2;
}
