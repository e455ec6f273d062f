/* Threads with thread-local counters, for breakpoint conditions over thread-local storage:
 * each of 4 threads calls probe 10 times with its own tlsv = 100 * thread + call, and the
 * total is printed at the end. */
#include <pthread.h>
#include <stdio.h>

__thread int tlsv;
__thread long tlsbig = 5;
static volatile long sink;

__attribute__((noinline)) static void probe(void)
{
	sink += tlsv; /* MARK:tls-probe */
}

static void *run(void *arg)
{
	long id = (long)arg;
	for (int i = 0; i < 10; i++) {
		tlsv = 100 * (int)id + i;
		probe();
	}
	return 0;
}

int main(void)
{
	pthread_t t[4];
	for (long i = 0; i < 4; i++)
		pthread_create(&t[i], 0, run, (void *)i);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], 0);
	printf("total %ld\n", sink);
	return 0;
}
