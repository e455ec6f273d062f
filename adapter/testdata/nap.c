/* A process that says it is ready and then sleeps in libc until killed: a pause always finds
 * it inside libc's sleep, whose source is not on this machine. Its rank is in a global and in
 * a local of main, for comparisons across ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int rank_id;

int main(void)
{
	const char *r = getenv("HPCDAP_RANK");
	int rank = r ? atoi(r) : 0;
	rank_id = rank;
	printf("napping\n");
	fflush(stdout);
	for (;;)
		sleep(60); /* MARK:nap */
}
