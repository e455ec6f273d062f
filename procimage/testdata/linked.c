/* Loads the libraries named on the command line with dlopen (beyond the ones it is linked
 * with), says "ready" and waits to be read. */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!dlopen(argv[i], RTLD_NOW)) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 2;
		}
	}
	printf("ready\n");
	fflush(stdout);
	pause();
	return 0;
}
