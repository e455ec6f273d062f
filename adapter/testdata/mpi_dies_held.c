/* An MPI program one of whose ranks dies while the launcher holds the job for the debugger: the
   rank named by DIE_RANK (OMPI_COMM_WORLD_RANK) starts a thread before main that waits until an
   hpcdap PMIx debugger daemon ("hpcdap pmix-daemon", which the launcher starts once it has
   reported the job ready, and which becomes the node's agent) runs beside it, started by the
   launcher's daemon that started the rank, and then ends the rank with exit status DIE_STATUS
   while its main thread is still held in MPI_Init: before its agent is in place, or, should
   the agent be quicker, before the debugger has taken the rank. */
#include <dirent.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* parent_of returns the parent of process pid, -1 when it cannot be read. */
static long parent_of(const char *pid)
{
	char path[300], stat[1024];
	snprintf(path, sizeof path, "/proc/%s/stat", pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	size_t n = fread(stat, 1, sizeof stat - 1, f);
	fclose(f);
	stat[n] = 0;
	char *end = strrchr(stat, ')'); /* after the command's name: " STATE PPID ..." */
	long ppid;
	if (end == NULL || sscanf(end + 1, " %*c %ld", &ppid) != 1)
		return -1;
	return ppid;
}

/* daemon_running says whether a sibling of this process (a child of the launcher's daemon on
   this node, which starts the ranks and the debugger daemons alike) runs "PROGRAM pmix-daemon
   ..." or, once that has become the agent, "PROGRAM agent ...". Only the processes started
   after this one are looked at, so that a look takes little time. */
static int daemon_running(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	long self = (long)getpid();
	int found = 0;
	if (d == NULL)
		return 0;
	while (!found && (e = readdir(d)) != NULL) {
		char path[300], args[4096];
		if (e->d_name[0] < '0' || e->d_name[0] > '9' || atol(e->d_name) <= self)
			continue;
		snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		size_t n = fread(args, 1, sizeof args - 1, f);
		fclose(f);
		args[n] = 0;
		size_t first = strnlen(args, n); /* the second argument follows the program's path */
		if (first + 1 < n && (strcmp(args + first + 1, "pmix-daemon") == 0 || strcmp(args + first + 1, "agent") == 0) &&
		    parent_of(e->d_name) == (long)getppid())
			found = 1;
	}
	closedir(d);
	return found;
}

static void *die_when_debugged(void *arg)
{
	struct timespec ts = {0, 1000000};
	(void)arg;
	while (!daemon_running())
		nanosleep(&ts, NULL);
	_exit(atoi(getenv("DIE_STATUS")));
}

__attribute__((constructor)) static void start(void)
{
	const char *die = getenv("DIE_RANK"), *me = getenv("OMPI_COMM_WORLD_RANK");
	pthread_t t;
	if (die != NULL && me != NULL && strcmp(die, me) == 0 && getenv("DIE_STATUS") != NULL)
		pthread_create(&t, NULL, die_when_debugged, NULL);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Finalize();
	return 0;
}
