/* Test program for the link-map query: linked with libm, loads libz with dlopen, then stops in
   loaded(); unloads libz, loads liblzma, stops in reloaded() and exits 0. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>

volatile double sink;

__attribute__((noinline)) void loaded(void *h) { sink += h != 0; }
__attribute__((noinline)) void reloaded(void *h) { sink += h != 0; }

int main(int argc, char **argv) {
	sink = cos((double)argc);
	void *h = dlopen("libz.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	loaded(h);
	dlclose(h);
	h = dlopen("liblzma.so.5", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	reloaded(h);
	printf("done %g\n", sink);
	return 0;
}
