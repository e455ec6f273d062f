/* Four threads call tick 2000 times each, at once: a conditional breakpoint in tick is hit by
 * several threads together. */
#include <pthread.h>
#include <stdio.h>

#define NTHREADS 4
#define ROUNDS 2000

volatile long sink;

void tick(int id, int n)
{
	sink += id * n; /* MARK:tick */
}

static void *run(void *arg)
{
	int id = (int)(long)arg;
	for (int n = 0; n < ROUNDS; n++)
		tick(id, n);
	return NULL;
}

int main(void)
{
	pthread_t th[NTHREADS];
	for (long i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, run, (void *)i);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	printf("sink %ld\n", sink);
	return 0;
}
