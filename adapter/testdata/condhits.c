/* Breakpoint conditions over every kind of operand: probe is called 60 times with values that
 * change with i, and each MARK line carries one condition in the tests (agent-side against
 * gdb's decision). */
#include <stdio.h>
#include <stdlib.h>

struct point {
	int x, y;
};

struct rec {
	struct point pt;
	char tag;
	short small;
	struct rec *next;
};

long gcount;
int garr[8] = { 5, 1, 4, 1, 5, 9, 2, 6 };
struct rec grec;
struct rec *gptr = &grec;
int rank;

int probe(int i, struct rec *r, double x, char c, unsigned u, long *p)
{
	int k = (i * 7) % 11; /* MARK:c-first */
	float f = (float)(i % 4) / 2; /* MARK:c-local */
	struct rec s = *r; /* MARK:c-arg */
	gcount += i % 3; /* MARK:c-float */
	k += s.tag == 'b'; /* MARK:c-struct */
	k -= (int)u; /* MARK:c-global */
	k ^= garr[i % 8]; /* MARK:c-array */
	k += (int)*p; /* MARK:c-deref */
	k += r->next ? r->next->pt.x : 0; /* MARK:c-logic */
	k += (int)f + c; /* MARK:c-unsigned */
	return k; /* MARK:c-last */
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 60;
	struct rec recs[3] = { { { 1, 2 }, 'a', -3, NULL }, { { 4, 5 }, 'b', 7, NULL }, { { -6, 15 }, 'c', 100, NULL } };
	long total = 0;
	rank = getenv("HPCDAP_RANK") ? atoi(getenv("HPCDAP_RANK")) : 0;
	recs[1].next = &recs[0];
	grec = recs[2];
	for (int i = 0; i < n; i++) {
		long v = (long)i * i - 40;
		struct rec *r = &recs[i % 3];
		total += probe(i, r, i * 0.25, "aqz"[i % 3], (unsigned)(i - 30), &v); /* MARK:c-call */
	}
	printf("total %ld\n", total);
	return 0;
}
