/* ranks: a 4-rank MPI test program. Each rank prints a labelled line; the arguments are
 * the exit status, how many seconds to run before MPI_Finalize, and (any third argument)
 * a line to print on standard error after each second. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, size;
	int status = argc > 1 ? atoi(argv[1]) : 0;
	int secs = argc > 2 ? atoi(argv[2]) : 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	printf("rank %d of %d pid %d\n", rank, size, (int) getpid());
	fflush(stdout);
	for (int i = 0; i < secs; i++) {
		sleep(1);
		if (argc > 3) {
			fprintf(stderr, "rank %d: second %d\n", rank, i + 1);
		}
	}
	MPI_Finalize();
	return status;
}
