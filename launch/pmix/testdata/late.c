/* late: an MPI program whose rank LATE_RANK (by PMIX_RANK) sleeps LATE_SECONDS
 * before MPI_Init; every rank prints a labelled line after it and exits 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, size;
	const char *late = getenv("LATE_RANK"), *me = getenv("PMIX_RANK");

	if (late != NULL && me != NULL && strcmp(late, me) == 0 && getenv("LATE_SECONDS") != NULL)
		sleep(atoi(getenv("LATE_SECONDS")));
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	printf("rank %d of %d pid %d\n", rank, size, (int) getpid());
	fflush(stdout);
	MPI_Finalize();
	return 0;
}
