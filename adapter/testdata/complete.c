/* Completion in the debug console: members through pointers and typedefs, nested structs and
 * an anonymous union, a local shadowing a global. Lines marked "MARK:name" are found by the
 * tests. */
#include <stdio.h>

struct inner {
	int depth;
	double weight;
};

typedef struct outer {
	int count;
	int color;
	struct inner in;
	struct inner *inp;
	union {
		long tag;
		char tagname[8];
	};
} outer_t;

int counter = 1;       /* a global, shadowed in main */
int countdown = 3;     /* a global */
static int cache_hits; /* a file static */

static int compute(outer_t *op, int coeff)
{
	int cooked = op->count * coeff;
	return cooked + op->in.depth; /* MARK:compute */
}

int main(void)
{
	struct inner leaf = {2, 0.5};
	outer_t root = {4, 7, {1, 1.5}, &leaf, {0}};
	outer_t *rootp = &root;
	int counter = 9; /* shadows the global */
	cache_hits = compute(rootp, counter);
	printf("%d %d\n", cache_hits, countdown); /* MARK:main */
	return 0;
}
