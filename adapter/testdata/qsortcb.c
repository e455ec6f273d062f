/* A comparison function called from inside libc: its callers are libc frames whose
   recorded source files (glibc's build tree) do not exist on this machine. */
#include <stdio.h>
#include <stdlib.h>

static int calls;

static int cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	calls++; /* MARK:cmp */
	return (x > y) - (x < y);
}

int main(void)
{
	int v[] = {5, 3, 9, 1, 7};
	qsort(v, 5, sizeof v[0], cmp);
	printf("%d %d %d\n", v[0], v[4], calls);
	return 0;
}
