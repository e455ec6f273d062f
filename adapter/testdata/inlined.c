/* inlined: one function inlined at two call sites, so that a breakpoint on its line has two
 * locations, which together count its hits. */
#include <stdio.h>

static inline __attribute__((always_inline)) int twice(int v)
{
	return v * 2; /* MARK:twice */
}

int main(void)
{
	long total = 0;
	for (int i = 0; i < 10; i++) {
		total += twice(i);
		total += twice(i + 100);
	}
	printf("total %ld\n", total);
	return 0;
}
