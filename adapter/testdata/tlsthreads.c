/* Eight workers (NWORKERS, -DNWORKERS=N for more) with thread-local variables, parked so that
 * their state stays fixed while a debugger attaches, detaches and another attaches. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <unistd.h>

#ifndef NWORKERS
#define NWORKERS 8
#endif

__thread int tlsvar = 999;            /* initialised TLS (.tdata): main keeps 999 */
__thread long tlsarr[3];              /* zero-initialised TLS (.tbss) */
static __thread double tlsscale = 0.5; /* file-local TLS */

static sem_t ready, never;

static void park(void)
{
	for (;;)
		sem_wait(&never); /* MARK:park */
}

void *worker(void *arg)
{
	long idx = (long)arg;
	tlsvar = 1000 + (int)idx;
	tlsarr[1] = 7 * idx + 3;
	tlsscale = idx + 0.25;
	sem_post(&ready);
	park();
	return NULL;
}

void *helper(void *arg) { return worker(arg); }

int main(void)
{
	pthread_t t[NWORKERS];
	sem_init(&ready, 0, 0);
	sem_init(&never, 0, 0);
	for (long i = 0; i < NWORKERS; i++)
		pthread_create(&t[i], NULL, i % 2 ? helper : worker, (void *)i);
	for (int i = 0; i < NWORKERS; i++)
		sem_wait(&ready);
	tlsarr[1] = -1; /* MARK:all-ready */
	printf("ready\n");
	fflush(stdout);
	park();
	return 0;
}
