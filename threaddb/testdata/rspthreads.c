/* Test program for package threaddb on Power, run live under QEMU user mode's GDB stub.
 *
 * Usage: rspthreads RECORDFILE [MODULEFILE]
 *
 * Main creates 8 workers. Each worker sets its thread-local variables (tlsvar = 1000 + I,
 * tlsarr[1] = 5000 + I) and records what it knows of itself in RECORDFILE, one line:
 *   thread ROUND I TID SELF R13 &tlsvar tlsvar &tlsarr[1] tlsarr[1] START
 * (gettid(), pthread_self(), its thread pointer, the start routine it was given: on ppc64
 * big-endian a function descriptor). Workers then block until woken, and return when woken.
 * Main records itself as I = -1 (tlsvar 999, start 0) and calls checkpoint1(), where the
 * debugger stops it with every worker blocked.
 *
 * Round 2, after checkpoint1() returns: worker 3 is woken and joined; worker 5 is woken and not
 * joined (main waits until its kernel thread is gone); worker 8 is created. Then checkpoint2().
 * After that every worker is woken and joined and main exits.
 *
 * With MODULEFILE, main first writes the loaded modules there (dl_iterate_phdr), one line each:
 *   module BIAS NAME
 * which a debugger of a dynamic build needs to find the thread library.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define N 8

__thread int tlsvar = 999;
__thread long tlsarr[3];

static FILE *rec;
static pthread_mutex_t reclock = PTHREAD_MUTEX_INITIALIZER;
static sem_t wake[N + 1], steady;
static volatile long tids[N + 1];
static int round_no = 1;

static void record(long i, void *start)
{
	uintptr_t tp;
	__asm__ volatile("mr %0,13" : "=r"(tp));
	pthread_mutex_lock(&reclock);
	fprintf(rec, "thread %d %ld %ld %#lx %#lx %#lx %d %#lx %ld %#lx\n", round_no, i,
		(long)syscall(SYS_gettid), (unsigned long)pthread_self(), (unsigned long)tp,
		(unsigned long)&tlsvar, tlsvar, (unsigned long)&tlsarr[1], tlsarr[1],
		(unsigned long)start);
	fflush(rec);
	pthread_mutex_unlock(&reclock);
}

static void *worker(void *arg)
{
	long i = (long)arg;
	tlsvar = 1000 + (int)i;
	tlsarr[1] = 5000 + i;
	tids[i] = syscall(SYS_gettid);
	record(i, (void *)worker);
	sem_post(&steady);
	while (sem_wait(&wake[i]) != 0)
		;
	return NULL;
}

/* Two functions, so that a debugger can leave the first by removing its breakpoint. */
static int module(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	fprintf(data, "module %#lx %s\n", (unsigned long)info->dlpi_addr, info->dlpi_name);
	return 0;
}

__attribute__((noinline)) void checkpoint1(void) { __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void checkpoint2(void) { __asm__ volatile("" ::: "memory"); }

int main(int argc, char **argv)
{
	pthread_t t[N + 1];
	if (argc < 2 || argc > 3 || !(rec = fopen(argv[1], "w"))) {
		fprintf(stderr, "usage: rspthreads RECORDFILE [MODULEFILE]\n");
		return 2;
	}
	if (argc == 3) {
		FILE *mods = fopen(argv[2], "w");
		if (!mods) {
			perror(argv[2]);
			return 2;
		}
		dl_iterate_phdr(module, mods);
		fclose(mods);
	}
	sem_init(&steady, 0, 0);
	for (int i = 0; i <= N; i++)
		sem_init(&wake[i], 0, 0);
	for (long i = 0; i < N; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < N; i++)
		sem_wait(&steady);
	record(-1, 0);
	checkpoint1();

	round_no = 2;
	sem_post(&wake[3]);
	pthread_join(t[3], NULL);
	sem_post(&wake[5]);
	while (syscall(SYS_tgkill, getpid(), (pid_t)tids[5], 0) == 0 || errno != ESRCH)
		usleep(1000);
	pthread_create(&t[N], NULL, worker, (void *)(long)N);
	sem_wait(&steady);
	record(-1, 0);
	checkpoint2();

	for (int i = 0; i <= N; i++)
		if (i != 3)
			sem_post(&wake[i]);
	for (int i = 0; i <= N; i++)
		if (i != 3)
			pthread_join(t[i], NULL);
	fclose(rec);
	return 0;
}
