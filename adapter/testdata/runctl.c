/* The run-control matrix's program. Every rank runs the same code (HPCDAP_RANK, HPCDAP_NP).
 * A second thread ticks throughout, so that stop mode "thread" has a thread that keeps
 * running. argv[1] picks what main does after its common part:
 *   steps   nothing more (the stepping script walks main and square), and the last rank
 *           exits early, during a step of the others;
 *   spin    loops until killed (something to pause);
 *   hammer  four threads call hot() 50 times each (several threads at one breakpoint). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile int ticks;

__attribute__((noinline)) int square(int x)
{
	int y = x * x; /* MARK:square-body */
	return y + 1; /* MARK:square-ret */
}

__attribute__((noinline)) int hot(int v)
{
	return v * 3; /* MARK:hot */
}

static void *ticker(void *arg)
{
	(void)arg;
	for (;;) {
		ticks++;
		usleep(2000); /* MARK:tick */
	}
	return NULL;
}

static void *hammer(void *arg)
{
	long id = (long)arg;
	int sum = 0;
	for (int i = 0; i < 50; i++)
		sum += hot((int)id + i);
	return (void *)(long)sum;
}

/* spin loops for ever; it first creates $READY_DIR/<rank>, so that a test knows the rank is in
 * the loop. */
__attribute__((noinline)) void spin(int rank)
{
	const char *dir = getenv("READY_DIR");
	if (dir) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%d", dir, rank);
		FILE *f = fopen(path, "w");
		if (f)
			fclose(f);
	}
	for (;;)
		usleep(5000); /* MARK:spin */
}

int main(int argc, char **argv)
{
	const char *r = getenv("HPCDAP_RANK"), *n = getenv("HPCDAP_NP");
	int rank = r ? atoi(r) : 0, np = n ? atoi(n) : 1;
	const char *what = argc > 1 ? argv[1] : "steps";
	pthread_t t;
	pthread_create(&t, NULL, ticker, NULL); /* MARK:create */
	usleep(1000 * (rank % 4)); /* MARK:stagger */
	int a = square(rank + 2); /* MARK:first */
	int b = a + rank; /* MARK:second */
	if (rank == np - 1 && strcmp(what, "steps") == 0)
		exit(40 + rank % 8); /* MARK:last-exit */
	b += square(b % 5); /* MARK:third */
	if (strcmp(what, "spin") == 0)
		spin(rank);
	if (strcmp(what, "hammer") == 0) {
		pthread_t h[4];
		for (long i = 0; i < 4; i++)
			pthread_create(&h[i], NULL, hammer, (void *)i);
		for (int i = 0; i < 4; i++)
			pthread_join(h[i], NULL);
	}
	return rank % 8; /* MARK:main-return */
}
