/* Rank 0 waits in master, every other rank in worker: a job whose first rank stands apart
 * from the rest, as a master and its workers do. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int rank_id;

__attribute__((noinline)) void master(int n)
{
	for (;;)
		sleep(60 + n % 2);
}

__attribute__((noinline)) void worker(int n)
{
	for (;;)
		sleep(60 + n % 2);
}

int main(void)
{
	const char *r = getenv("HPCDAP_RANK");
	int rank = r ? atoi(r) : 0;
	rank_id = rank;
	printf("napping\n");
	fflush(stdout);
	if (rank == 0)
		master(rank);
	else
		worker(rank);
	return 0;
}
