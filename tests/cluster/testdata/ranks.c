/* An MPI job for the debugger tests under srun: every rank passes MPI_Init, meets the
   others in a barrier, calls at_breakpoint (a place for a breakpoint), optionally says so and sleeps
   argv[1] seconds, prints where it runs and exits with 10 + its rank, so that per-rank exit
   codes can be told apart. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile int reached;

__attribute__((noinline)) void at_breakpoint(int rank) {
    reached = rank + 1; /* MARK: bp */
}

int main(int argc, char **argv) {
    int rank, size;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);
    at_breakpoint(rank);
    if (argc > 1) {
        printf("rank %d asleep\n", rank);
        fflush(stdout);
        sleep(atoi(argv[1]));
    }
    gethostname(host, sizeof host);
    printf("rank %d/%d on %s pid %d\n", rank, size, host, (int)getpid());
    fflush(stdout);
    MPI_Finalize();
    return 10 + rank;
}
