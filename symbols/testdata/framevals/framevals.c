/* Values of the frames of a stopped stack, some of them behind the C library's frames: a
 * comparison function that qsort calls (stopped in a call inlined into it), under a recursion
 * whose locals live across calls. */
#include <stdlib.h>
#include <string.h>

volatile int sink;
long g_total = 42;
unsigned char g_level = 200;
_Bool g_odd; /* holds 2: set byte-wise */

static inline __attribute__((always_inline)) int order(int x, int y)
{
	int diff = x - y;
	sink = diff; /* stop here */
	return (x > y) - (x < y);
}

__attribute__((noinline)) static int cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	int r = order(x, y);
	sink += r;
	return r;
}

__attribute__((noinline)) static int sort_some(int depth, char tag, unsigned short width)
{
	int vals[5] = {5, 3, 9, 1, 7};
	int keep = depth * 3 + width;
	_Bool flag = depth > 1;
	qsort(vals, 5, sizeof vals[0], cmp);
	sink = keep + flag + tag;
	return vals[0] + keep;
}

__attribute__((noinline)) static int recurse(int depth, long acc)
{
	long mine = acc * 2 + depth;
	int r;
	if (depth == 0)
		r = sort_some(3, 'q', (unsigned short)(acc & 0xff));
	else
		r = recurse(depth - 1, mine);
	sink = (int)mine;
	return r + (int)mine;
}

int main(int argc, char **argv)
{
	int base = argc + 4;
	(void)argv;
	memset(&g_odd, 2, sizeof g_odd);
	return recurse(3, base) & 1;
}
