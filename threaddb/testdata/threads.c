/* Test program for package threaddb.
 *
 * Usage: threads NTHREADS
 *
 * Creates NTHREADS workers. Each sets thread-local variables and thread-specific data to values
 * derived from its index, then blocks. Main prints "ready KEY DEADKEY" once every thread has
 * reached its steady state, then obeys commands on stdin, one per line:
 *   exit I    wake worker I, let it return, join it, print "exited I"
 *   finish I  wake worker I and let it return without joining it, print "finished I"
 *   spawn     create one more worker, wait until it is steady, print "spawned I"
 * It exits at end of input.
 *
 * Worker I: tlsvar = 1000 + I, tlsarr[1] = 5000 + I, pthread_setspecific(key, 0x1000 + I) for
 * even I only; worker 1 disables cancellation, worker 2 selects asynchronous cancellation.
 * Even workers start in worker_even, odd ones in worker_odd. Main: tlsvar = 999, key value 0x999.
 * With -DWITH_LIB, libvar (from a shared library) = 2000 + I (main: 1999), and workers with
 * I % 3 == 0 touch lazyvar in a library loaded with dlopen, setting it to 3000 + I. Once every
 * worker is steady, main loads libie.so with dlopen: its initial-exec ievar lives in static TLS.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#ifdef WITH_LIB
#include <dlfcn.h>
extern __thread int libvar;
static int *(*lazy_addr)(void);
#endif

__thread int tlsvar = -1;
__thread long tlsarr[3];

#define MAXT 4096
static pthread_key_t key, deadkey;
static sem_t wake[MAXT];
static sem_t steady;
static pthread_t tids[MAXT];
static pthread_barrier_t barrier;
static int use_barrier = 1;

static void setup(long i)
{
	tlsvar = 1000 + (int)i;
	tlsarr[1] = 5000 + i;
	if (i % 2 == 0)
		pthread_setspecific(key, (void *)(uintptr_t)(0x1000 + i));
	if (i == 1)
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	if (i == 2)
		pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
#ifdef WITH_LIB
	libvar = 2000 + (int)i;
	if (i % 3 == 0)
		*lazy_addr() = 3000 + (int)i;
#endif
}

static void block(long i)
{
	if (use_barrier)
		pthread_barrier_wait(&barrier);
	else
		sem_post(&steady);
	while (sem_wait(&wake[i]) != 0 && errno == EINTR)
		;
}

static void *worker_even(void *arg)
{
	long i = (long)arg;
	setup(i);
	block(i);
	return NULL;
}

static void *worker_odd(void *arg)
{
	long i = (long)arg;
	setup(i);
	block(i);
	return arg;
}

static void start(long i, pthread_attr_t *attr)
{
	sem_init(&wake[i], 0, 0);
	int err = pthread_create(&tids[i], attr, i % 2 ? worker_odd : worker_even, (void *)i);
	if (err) {
		fprintf(stderr, "pthread_create %ld: %s\n", i, strerror(err));
		exit(2);
	}
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 8;
	if (n < 1 || n >= MAXT / 2)
		return 2;
	setvbuf(stdout, NULL, _IONBF, 0);
#ifdef WITH_LIB
	void *h = dlopen("liblazy.so", RTLD_NOW);
	if (!h || !(lazy_addr = (int *(*)(void))dlsym(h, "lazy_addr"))) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	libvar = 1999;
#endif
	/* A key that was created and deleted: its slot is free, so it has no values. */
	pthread_key_create(&deadkey, NULL);
	pthread_key_create(&key, NULL);
	pthread_key_delete(deadkey);
	tlsvar = 999;
	pthread_setspecific(key, (void *)0x999);
	sem_init(&steady, 0, 0);

	pthread_attr_t attr;
	pthread_attr_init(&attr);
	if (n > 64)
		pthread_attr_setstacksize(&attr, 128 * 1024);
	pthread_barrier_init(&barrier, NULL, (unsigned)n + 1);
	for (long i = 0; i < n; i++)
		start(i, &attr);
	pthread_barrier_wait(&barrier);
	use_barrier = 0;
#ifdef WITH_LIB
	if (!dlopen("libie.so", RTLD_NOW)) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
#endif
	printf("ready %u %u\n", (unsigned)key, (unsigned)deadkey);

	char line[64];
	long next = n;
	while (fgets(line, sizeof line, stdin)) {
		long i;
		if (sscanf(line, "exit %ld", &i) == 1 && i >= 0 && i < next) {
			sem_post(&wake[i]);
			pthread_join(tids[i], NULL);
			printf("exited %ld\n", i);
		} else if (sscanf(line, "finish %ld", &i) == 1 && i >= 0 && i < next) {
			sem_post(&wake[i]);
			printf("finished %ld\n", i);
		} else if (strncmp(line, "spawn", 5) == 0 && next < MAXT) {
			start(next, &attr);
			while (sem_wait(&steady) != 0 && errno == EINTR)
				;
			printf("spawned %ld\n", next);
			next++;
		}
	}
	return 0;
}
