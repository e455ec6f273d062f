/* An MPI job for the launcher tests. Every rank reduces its rank number with a user-defined
   operation, which Open MPI and MPICH call from inside MPI_Allreduce, so a breakpoint there
   has MPI frames between it and main. With GO_FILE the ranks first wait until that file
   exists (a running job to attach to), each leaving DONE_DIR/ready.N when it starts waiting;
   with DONE_DIR each rank leaves DONE_DIR/rank.N after MPI_Finalize. Every rank exits with 10 + its rank.
   The rank the launcher names LATE_RANK (by OMPI_COMM_WORLD_RANK or PMI_RANK) sleeps LATE_SECONDS
   before MPI_Init: a rank that starts late.
   Usage: mpi_job [GO_FILE [DONE_DIR]] ("-" for no GO_FILE) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void combine(void *in, void *inout, int *len, MPI_Datatype *type)
{
	int *a = in, *b = inout;
	(void)type;
	for (int i = 0; i < *len; i++)
		b[i] += a[i]; /* MARK:combine */
}

static void touch(const char *dir, const char *what, int rank)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.%d", dir, what, rank);
	FILE *f = fopen(path, "w");
	if (f)
		fclose(f);
}

static void wait_for(const char *path)
{
	struct timespec ts = {0, 20000000};
	while (access(path, F_OK) != 0)
		nanosleep(&ts, NULL); /* MARK:wait */
}

int main(int argc, char **argv)
{
	int rank, size, sum = 0;
	MPI_Op op;
	const char *late = getenv("LATE_RANK"), *me = getenv("OMPI_COMM_WORLD_RANK");
	if (me == NULL)
		me = getenv("PMI_RANK");
	if (late != NULL && me != NULL && strcmp(late, me) == 0 && getenv("LATE_SECONDS") != NULL)
		sleep(atoi(getenv("LATE_SECONDS")));
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size); /* MARK:after_init */
	if (argc > 1 && strcmp(argv[1], "-") != 0) {
		if (argc > 2)
			touch(argv[2], "ready", rank);
		wait_for(argv[1]);
	}
	MPI_Op_create(combine, 1, &op);
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, op, MPI_COMM_WORLD); /* MARK:allreduce */
	MPI_Op_free(&op);
	printf("rank %d of %d: sum %d\n", rank, size, sum);
	fflush(stdout);
	MPI_Finalize();
	if (argc > 2)
		touch(argv[2], "rank", rank);
	return 10 + rank;
}
