/* Records what the program sees of its own image, for the reader of it to be checked
 * against: auxiliary-vector entries (getauxval) and the loaded objects (dl_iterate_phdr), in
 * the file named by argv[1]; then calls recorded(), where a debugger stops it. */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <sys/auxv.h>

static int module(struct dl_phdr_info *info, size_t size, void *data)
{
	fprintf(data, "module %#lx %s\n", (unsigned long)info->dlpi_addr, info->dlpi_name);
	return 0;
}

__attribute__((noinline)) void recorded(void)
{
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 2;
	unsigned long keys[] = {AT_PHDR, AT_PHENT, AT_PHNUM, AT_PAGESZ, AT_BASE, AT_ENTRY, AT_HWCAP};
	for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++)
		fprintf(f, "aux %lu %#lx\n", keys[i], getauxval(keys[i]));
	dl_iterate_phdr(module, f);
	fclose(f);
	recorded();
	return 0;
}
