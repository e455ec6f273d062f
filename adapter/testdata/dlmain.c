/* Loads the library named by argv[1] with dlopen and calls its plugin_compute. With argv[2]
   (GO_FILE), it then waits until that file exists before it ends.
   Usage: dlmain LIB.so [GO_FILE] */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

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
	fflush(stdout);
	while (argc > 2 && access(argv[2], F_OK) != 0)
		usleep(10000);
	return 0;
}
