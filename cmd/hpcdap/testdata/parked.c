/* A process whose threads wait for ever in distinct functions, for `hpcdap stacks --pids`:
 * main in park_main, two workers in park_worker. argv[1], when given, is a file created once
 * both workers run. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_barrier_t up;

__attribute__((noinline)) static void park_worker(void)
{
	for (;;)
		pause();
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&up);
	park_worker();
	return NULL;
}

__attribute__((noinline)) static void park_main(void)
{
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	pthread_t t[2];
	pthread_barrier_init(&up, NULL, 3);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	pthread_barrier_wait(&up);
	if (argc > 1) {
		FILE *f = fopen(argv[1], "w");
		if (f != NULL)
			fclose(f);
	}
	park_main();
	return 0;
}
