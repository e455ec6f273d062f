/* The adapter's main test program: recursion, structs, arrays, pointers, globals, a watched
 * variable, a fault on request, and an exit code that depends on the rank. Lines marked
 * "MARK:name" are found by the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct point {
	int x, y;
};

struct shape {
	const char *name;
	struct point corner[2];
	double scale;
};

int counter;
static int calls;
int values[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
const char *greeting = "hello, ranks";

int leaf(int depth, struct shape *s)
{
	int local = depth * 10; /* MARK:leaf-first */
	s->scale += local;
	counter += local + 1; /* MARK:leaf-write */
	return local + s->corner[1].x; /* MARK:leaf-return */
}

int middle(int depth, struct shape *s)
{
	int result;
	if (depth > 0)
		result = middle(depth - 1, s) + 1; /* MARK:middle-recurse */
	else
		result = leaf(depth, s); /* MARK:middle-call-leaf */
	calls++; /* MARK:middle-after */
	return result;
}

int main(int argc, char **argv)
{
	const char *r = getenv("HPCDAP_RANK");
	int rank = r ? atoi(r) : 0;
	struct shape sh = { "box", { { 1, 2 }, { 3 + rank, 4 } }, 1.5 };
	int total = 0; /* MARK:main-start */
	for (int i = 0; i < 2; i++)
		total += middle(rank + 1, &sh); /* MARK:main-call */
	if (argc > 1 && strcmp(argv[1], "segv") == 0) {
		int *volatile p = (int *)(long)(0x40 + rank * 8);
		*p = total; /* MARK:segv */
	}
	printf("rank %d total %d counter %d calls %d\n", rank, total, counter, calls); /* MARK:main-print */
	return rank == 1 ? 3 : 0; /* MARK:main-return */
}
