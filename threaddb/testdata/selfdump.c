/* Test program for package threaddb on Power under QEMU user mode.
 *
 * Usage: selfdump DUMPFILE
 *
 * Main and 4 workers record what each knows about itself: its kernel thread id, pthread_self(),
 * its thread pointer (r13), the address and value of thread-local variables, its value for a
 * thread-specific data key, and its start routine. While the workers wait on a barrier, main
 * writes those records, the loaded modules (dl_iterate_phdr) and every readable page of the
 * address space (from /proc/self/maps, which QEMU shows in guest addresses) to DUMPFILE: a
 * snapshot the test reads like a core file.
 *
 * Built dynamic (-DWITH_IE), main loads libie.so with dlopen after the workers exist and each
 * thread sets its initial-exec ievar to 4000 + index (main: 3999) and records its address: the
 * workers' DTVs predate the module, so a debugger must find the block in static TLS.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define N 4

__thread int tlsvar = -1;
__thread long tlsarr[3];

struct rec {
	long tid;
	uintptr_t self, tp, tlsaddr, arraddr, start, spec, ieaddr;
	long tls, arr, ie;
};

static struct rec recs[N + 1];
static pthread_key_t key;
static pthread_barrier_t loaded, recorded, dumped;
static int *(*ie_addr)(void);

static uintptr_t thread_pointer(void)
{
	uintptr_t r;
	__asm__ volatile("mr %0,13" : "=r"(r));
	return r;
}

static void record(int slot, void *(*start)(void *))
{
	struct rec *r = &recs[slot];
	r->tid = syscall(SYS_gettid);
	r->self = (uintptr_t)pthread_self();
	r->tp = thread_pointer();
	r->tlsaddr = (uintptr_t)&tlsvar;
	r->tls = tlsvar;
	r->arraddr = (uintptr_t)&tlsarr[1];
	r->arr = tlsarr[1];
	r->start = (uintptr_t)start;
	r->spec = (uintptr_t)pthread_getspecific(key);
	if (ie_addr) {
		*ie_addr() = 4000 + slot - 1;
		r->ieaddr = (uintptr_t)ie_addr();
		r->ie = *ie_addr();
	}
}

static void *worker(void *arg)
{
	long i = (long)arg;
	tlsvar = 1000 + (int)i;
	tlsarr[1] = 5000 + i;
	if (i % 2 == 0)
		pthread_setspecific(key, (void *)(uintptr_t)(0x1000 + i));
	pthread_barrier_wait(&loaded);
	record((int)i + 1, worker);
	pthread_barrier_wait(&recorded);
	pthread_barrier_wait(&dumped);
	return NULL;
}

static int module(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	fprintf((FILE *)data, "module %#lx %s\n", (unsigned long)info->dlpi_addr, info->dlpi_name);
	return 0;
}

static void dump_memory(FILE *out)
{
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[512];
	if (!maps) {
		perror("maps");
		exit(2);
	}
	while (fgets(line, sizeof line, maps)) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r')
			continue;
		fprintf(out, "map %#lx %#lx\n", lo, hi);
		for (unsigned long a = lo; a < hi; a += 4096) {
			const unsigned char *p = (const unsigned char *)a;
			int zero = 1;
			for (int k = 0; k < 4096; k++)
				if (p[k]) {
					zero = 0;
					break;
				}
			if (zero)
				continue;
			fprintf(out, "data %#lx 4096\n", a);
			fwrite(p, 1, 4096, out);
		}
	}
	fclose(maps);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	pthread_key_create(&key, NULL);
	tlsvar = 999;
	pthread_setspecific(key, (void *)0x999);
	pthread_barrier_init(&loaded, NULL, N + 1);
	pthread_barrier_init(&recorded, NULL, N + 1);
	pthread_barrier_init(&dumped, NULL, N + 1);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_t t[N];
	for (long i = 0; i < N; i++)
		if (pthread_create(&t[i], &attr, worker, (void *)i))
			return 2;
#ifdef WITH_IE
	void *h = dlopen("libie.so", RTLD_NOW);
	if (!h || !(ie_addr = (int *(*)(void))dlsym(h, "ie_addr"))) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
#endif
	pthread_barrier_wait(&loaded);
	record(0, NULL);
	pthread_barrier_wait(&recorded);

	FILE *out = fopen(argv[1], "w");
	if (!out)
		return 2;
	fprintf(out, "pid %d\nkey %u\n", getpid(), (unsigned)key);
	for (int i = 0; i <= N; i++) {
		struct rec *r = &recs[i];
		fprintf(out, "thread %ld %#lx %#lx %#lx %ld %#lx %ld %#lx %#lx %#lx %ld\n", r->tid,
			(unsigned long)r->self, (unsigned long)r->tp, (unsigned long)r->tlsaddr, r->tls,
			(unsigned long)r->arraddr, r->arr, (unsigned long)r->spec, (unsigned long)r->start,
			(unsigned long)r->ieaddr, r->ie);
	}
	dl_iterate_phdr(module, out);
	fflush(out);
	dump_memory(out);
	fprintf(out, "end\n");
	fclose(out);
	pthread_barrier_wait(&dumped);
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	return 0;
}
