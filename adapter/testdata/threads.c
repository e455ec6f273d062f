/* Two worker threads beside main, for thread listing and single-thread stepping. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

volatile int go;
volatile long work[2];
__thread long tls_id = -1; /* thread-local: each worker sets its own */

void *worker(void *arg)
{
	long id = (long)arg;
	tls_id = id + 100;
	while (!go)
		usleep(1000);
	for (;;)
		work[id]++; /* MARK:worker-loop */
	return NULL;
}

int main(void)
{
	pthread_t t[2];
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	usleep(100000); /* let the workers reach their wait loop */
	go = 1; /* MARK:main-go */
	for (;;)
		usleep(1000); /* MARK:main-sleep */
}
