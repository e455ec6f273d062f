/* Loads argv[1] with dlopen, unloads it, then loads argv[2], which the dynamic linker maps
   where the first library was, and has it call back into the program. A debugger that
   kept the first library's place in its module list would name and unwind the second
   library's frame with the first one's symbols and call frame information.
   Prints "second over first" when the second library's function lies in the range the
   first library occupied. With GO_FILE it waits, once the first library is loaded, until that
   file exists.
   Usage: reload FIRST.so SECOND.so [GO_FILE] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int callback(int x)
{
	return x * 2; /* MARK:callback */
}

/* span returns the lowest and highest address of a loaded object's segments. */
static void span(void *h, unsigned long *lo, unsigned long *hi)
{
	struct link_map *lm;
	dlinfo(h, RTLD_DI_LINKMAP, &lm);
	const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)lm->l_addr;
	const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(lm->l_addr + eh->e_phoff);
	*lo = ~0UL;
	*hi = 0;
	for (int i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		unsigned long a = lm->l_addr + ph[i].p_vaddr, b = a + ph[i].p_memsz;
		if (a < *lo)
			*lo = a;
		if (b > *hi)
			*hi = b;
	}
}

int main(int argc, char **argv)
{
	void *first = dlopen(argv[1], RTLD_NOW);
	if (!first) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	unsigned long lo, hi;
	span(first, &lo, &hi);
	printf("first loaded\n"); /* MARK:first-loaded */
	fflush(stdout);
	struct timespec ts = {0, 20000000};
	while (argc > 3 && access(argv[3], F_OK) != 0)
		nanosleep(&ts, NULL);
	dlclose(first);
	void *second = dlopen(argv[2], RTLD_NOW);
	if (!second) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	int (*call)(int (*)(int), int) = (int (*)(int (*)(int), int))dlsym(second, "lib_call");
	unsigned long at = (unsigned long)call;
	if (at >= lo && at < hi)
		printf("second over first\n");
	int r = call(callback, 20); /* MARK:call-second */
	printf("second says %d\n", r);
	return 0;
}
