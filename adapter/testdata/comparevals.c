/* Ranks stopped at three kinds of places for comparisons across ranks: rank % 3 == 0 sleeps in
 * libc under wait_a, rank % 3 == 1 under wait_b (which holds a pointer that is null on some
 * ranks), rank % 3 == 2 spins in spin, each at its own pc when paused. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct cell {
	int v;
};

int rank_id;
double weight;
struct cell cells[8];
volatile long spun;

__attribute__((noinline)) void wait_a(int depth, char letter, _Bool flag)
{
	long here = depth * 100L + letter;
	for (;;)
		sleep(60 + (int)(here & 1) + flag);
}

__attribute__((noinline)) void wait_b(int depth, struct cell *cp)
{
	int twice = depth * 2;
	for (;;)
		sleep(60 + twice % 2 + (cp != 0));
}

__attribute__((noinline)) void spin(int n)
{
	for (;;)
		spun += n;
}

int main(void)
{
	const char *r = getenv("HPCDAP_RANK");
	int rank = r ? atoi(r) : 0;
	rank_id = rank;
	weight = rank / 4.0;
	cells[rank % 8].v = rank * 7;
	printf("ready\n");
	fflush(stdout);
	switch (rank % 3) {
	case 0:
		wait_a(rank / 3, 'a' + rank % 26, rank % 2);
		break;
	case 1:
		wait_b(rank / 3, rank % 2 ? &cells[rank % 8] : 0);
		break;
	default:
		spin(rank);
	}
	return 0;
}
