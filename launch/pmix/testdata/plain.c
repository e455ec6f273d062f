/* plain: a program that is no MPI program; it prints its PMIx rank and exits with argv[1]. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *rank = getenv("PMIX_RANK");
	printf("plain rank %s pid %d\n", rank ? rank : "?", (int) getpid());
	return argc > 1 ? atoi(argv[1]) : 0;
}
