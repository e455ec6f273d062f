/* Two ranks in lock step through a shared file ($SYNC_FILE, $ITERS rounds): in each round rank
 * 0 calls hit() just as rank 1 calls cond(), so that a breakpoint in hit() stops the job while
 * a breakpoint in cond() whose condition does not hold is being passed on. Neither ends before
 * the other is through its last round. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

__attribute__((noinline)) int hit(int v)
{
	return v + 1; /* MARK:hit */
}
__attribute__((noinline)) int cond(int v)
{
	return v + 2; /* MARK:cond */
}

int main(void)
{
	int rank = atoi(getenv("HPCDAP_RANK"));
	int fd = open(getenv("SYNC_FILE"), O_RDWR | O_CREAT, 0600);
	ftruncate(fd, 4096);
	volatile int *s = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int n = atoi(getenv("ITERS"));
	for (int it = 0; it < n; it++) {
		if (rank == 0) {
			while (s[1] != it + 1)
				;
			s[0] = it + 1;
			hit(it);
		} else {
			s[1] = it + 1;
			while (s[0] != it + 1)
				;
			cond(it);
		}
	}
	/* Rank 1 stays until rank 0 is past its last hit(): otherwise it could exit while the
	 * last round's stop of the job is on its way to it. */
	if (rank == 0)
		s[2] = 1;
	else
		while (s[2] != 1)
			;
	return 0;
}
