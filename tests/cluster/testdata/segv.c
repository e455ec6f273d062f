/* An MPI job whose rank 2 dereferences a null pointer in crash() once every rank has passed
   MPI_Init; the other ranks sleep, so that the fault is the job's only event. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int *volatile nowhere;

__attribute__((noinline)) void crash(int rank) {
    *nowhere = rank; /* MARK: fault */
}

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 2)
        crash(rank);
    sleep(120);
    MPI_Finalize();
    return 0;
}
