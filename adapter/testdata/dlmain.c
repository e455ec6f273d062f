/* Loads the library named by argv[1] with dlopen and calls its plugin_compute. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	int (*f)(int) = (int (*)(int))dlsym(h, "plugin_compute");
	int r = f(6); /* MARK:call-plugin */
	printf("plugin says %d\n", r);
	return 0;
}
