/* An MPI program whose rank 1 dies before MPI_Init (SIGABRT): the job cannot be held whole. */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	const char *rank = getenv("OMPI_COMM_WORLD_RANK");
	if (rank != NULL && atoi(rank) == 1)
		abort();
	MPI_Init(&argc, &argv);
	MPI_Finalize();
	return 0;
}
