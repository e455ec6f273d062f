/* A deadlocked MPI job for `hpcdap stacks`: rank 3 waits in stuck_waiting for SIGUSR1, so the
 * other ranks wait for it in MPI_Barrier inside wait_at_barrier. SIGUSR1 to rank 3 lets the
 * job finish normally. argv[1], when given, is a directory where each rank leaves
 * "rank.N" once it is about to block. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>

static volatile sig_atomic_t released;

static void on_usr1(int sig)
{
	(void)sig;
	released = 1;
}

static void mark(const char *dir, int rank)
{
	char path[4096];
	FILE *f;
	if (dir == NULL)
		return;
	snprintf(path, sizeof path, "%s/rank.%d", dir, rank);
	if ((f = fopen(path, "w")) != NULL)
		fclose(f);
}

__attribute__((noinline)) static void stuck_waiting(sigset_t *old)
{
	while (!released)
		sigsuspend(old);
}

__attribute__((noinline)) static void wait_at_barrier(void)
{
	MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
	int rank;
	sigset_t usr1, old;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, &old);
	signal(SIGUSR1, on_usr1);
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	mark(argc > 1 ? argv[1] : NULL, rank);
	if (rank == 3)
		stuck_waiting(&old);
	wait_at_barrier();
	MPI_Finalize();
	return 0;
}
