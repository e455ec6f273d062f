/* A deadlocked MPI job: rank 0 waits in wait_for_token for a message rank 1 never sends;
   every other rank waits in wait_at_barrier for rank 0, which never arrives. The job blocks
   until it is cancelled. */
#include <mpi.h>
#include <stdio.h>

__attribute__((noinline)) void wait_for_token(void) {
    int token;
    MPI_Recv(&token, 1, MPI_INT, 1, 42, MPI_COMM_WORLD, MPI_STATUS_IGNORE); /* MARK: recv */
}

__attribute__((noinline)) void wait_at_barrier(void) {
    MPI_Barrier(MPI_COMM_WORLD); /* MARK: barrier */
}

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("rank %d blocking\n", rank);
    fflush(stdout);
    if (rank == 0)
        wait_for_token();
    else
        wait_at_barrier();
    MPI_Finalize();
    return 0;
}
