/* Multi-threaded test program: NTHREADS workers meet at a barrier, then each calls bump()
   ITER times. main joins them and prints the total. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NTHREADS 4

volatile long total;
volatile int forever;
pthread_barrier_t barrier;
pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
long iter = 1;

__attribute__((noinline)) void bump(long id) {
	pthread_mutex_lock(&mu);
	total += id;
	pthread_mutex_unlock(&mu);
}

static void *worker(void *arg) {
	long id = (long)arg;
	pthread_barrier_wait(&barrier);
	for (long i = 0; i < iter; i++)
		bump(id);
	while (forever)
		usleep(100000);
	return NULL;
}

int main(int argc, char **argv) {
	pthread_t th[NTHREADS];
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc > 1)
		iter = atol(argv[1]);
	forever = argc > 2;
	pthread_barrier_init(&barrier, NULL, NTHREADS);
	for (long i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)(i + 1));
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	printf("total %ld\n", total);
	return 0;
}
