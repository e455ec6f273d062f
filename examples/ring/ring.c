/*
 * ring: the example job of `hpcdap demo`.
 *
 * Every rank integrates its slice of 4/(1+x^2) over [0,1] (even and odd ranks through
 * different functions), then the partial sums travel once around a ring of named pipes and
 * the total (an approximation of pi) travels around once more, so that every rank prints it.
 * Rank r reads its messages from the FIFO <dir>/ring.<r>.
 *
 * The rank and the job size come from the launcher's environment: hpcdap's local launcher
 * (HPCDAP_RANK, HPCDAP_NP), Open MPI, MPICH/PMI or Slurm.
 *
 * Build: gcc -g -O0 -o ring ring.c        Run: HPCDAP_RANK=0 HPCDAP_NP=1 ./ring /tmp
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLICES 4000000

static int rank, nranks;
static const char *dir = ".";

static int env_int(const char *const *names, int fallback)
{
	for (; *names; names++) {
		const char *v = getenv(*names);
		if (v && *v)
			return atoi(v);
	}
	return fallback;
}

/* The midpoint rule over slices [first, first+count) of [0,1]. */
double integrate(long first, long count, double h)
{
	double sum = 0.0;
	for (long i = first; i < first + count; i++) {
		double x = h * (i + 0.5);
		sum += 4.0 / (1.0 + x * x);
	}
	return sum * h;
}

/* Even ranks take their slices in one block... */
double compute_even(int r, int n)
{
	long per = SLICES / n;
	return integrate(r * per, r == n - 1 ? SLICES - r * per : per, 1.0 / SLICES);
}

/* ...odd ranks in two halves, so the two kinds of rank have different stacks. */
double compute_odd(int r, int n)
{
	long per = SLICES / n;
	long count = r == n - 1 ? SLICES - r * per : per;
	double first_half = integrate(r * per, count / 2, 1.0 / SLICES);
	return first_half + integrate(r * per + count / 2, count - count / 2, 1.0 / SLICES);
}

static void inbox(int r, char *buf, size_t n)
{
	snprintf(buf, n, "%s/ring.%d", dir, r);
}

static void die(const char *what)
{
	fprintf(stderr, "rank %d: %s: %s\n", rank, what, strerror(errno));
	exit(2);
}

/* Sends one value to rank `to` (opening its FIFO waits until it listens). */
void send_value(int to, double v)
{
	char path[4096];
	inbox(to, path, sizeof path);
	if (mkfifo(path, 0600) != 0 && errno != EEXIST)
		die("mkfifo");
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		die("open for writing");
	if (write(fd, &v, sizeof v) != sizeof v)
		die("write");
	close(fd);
}

/* Waits for one value on this rank's FIFO. */
double recv_value(int fd)
{
	double v;
	size_t got = 0;
	while (got < sizeof v) {
		ssize_t n = read(fd, (char *)&v + got, sizeof v - got);
		if (n < 0 && errno != EINTR)
			die("read");
		if (n > 0)
			got += n;
	}
	return v;
}

/* Sums every rank's value around the ring and hands the total to every rank. */
double ring_sum(double local)
{
	char path[4096];
	double total;
	int right = (rank + 1) % nranks;

	inbox(rank, path, sizeof path);
	if (mkfifo(path, 0600) != 0 && errno != EEXIST)
		die("mkfifo");
	int in = open(path, O_RDWR); /* read-write: never blocks, never sees end of file */
	if (in < 0)
		die("open for reading");
	if (rank == 0) {
		send_value(right, local);
		total = recv_value(in); /* the sum comes back from the last rank */
		if (right != 0 && right != nranks - 1)
			send_value(right, total); /* the last rank has it already */
	} else {
		double partial = recv_value(in) + local;
		if (rank == nranks - 1) {
			total = partial; /* the last rank closes the ring */
			send_value(right, total);
		} else {
			send_value(right, partial);
			total = recv_value(in); /* the total on its way round */
			if (right != nranks - 1)
				send_value(right, total);
		}
	}
	close(in);
	unlink(path);
	return total;
}

int main(int argc, char **argv)
{
	static const char *const rank_vars[] = { "HPCDAP_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", NULL };
	static const char *const size_vars[] = { "HPCDAP_NP", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL };
	rank = env_int(rank_vars, 0);
	nranks = env_int(size_vars, 1);
	if (argc > 1)
		dir = argv[1];

	double local = rank % 2 == 0 ? compute_even(rank, nranks) : compute_odd(rank, nranks);
	double pi = ring_sum(local);
	printf("rank %d of %d: my slice %.12f, pi = %.12f\n", rank, nranks, local, pi);
	return 0;
}
