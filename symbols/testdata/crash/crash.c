/* Test program for the symbols package on other machines (run under QEMU user
 * mode): it aborts inside nested calls and the core file QEMU writes is
 * examined by gdb-multiarch and by the package. The STOP marker names the
 * function whose frame the expressions after it (separated by ';') are
 * printed in. */
#include <stdlib.h>
#include <string.h>

struct rec {
	int id;
	short s;
	unsigned char flags : 3;
	unsigned char mode : 4;
	double w;
	char name[8];
	struct rec *next;
};

struct rec g_recs[3];
long g_total = -5;
float g_ratio = 0.75f;
static int depth_reached;

__attribute__((noinline)) int leaf(struct rec *r, int depth)
{
	int local = r->id * 3 + depth;
	depth_reached = depth;
	if (depth == 2)
		abort(); /* STOP:leaf ; r->id ; r->w ; r->name ; *r ; g_total ; local + 1 ; r->flags ; r->mode ; g_ratio * 2 ; g_recs[1].next->s ; depth_reached */
	return local;
}

__attribute__((noinline)) int middle(struct rec *r, int depth)
{
	int v = leaf(r, depth + 1);
	return v + middle(r->next, depth + 1);
}

int main(int argc, char **argv)
{
	for (int i = 0; i < 3; i++) {
		g_recs[i].id = 10 + i;
		g_recs[i].s = -i;
		g_recs[i].flags = i + 1;
		g_recs[i].mode = 9 - i;
		g_recs[i].w = 1.5 * i;
		strcpy(g_recs[i].name, "rec");
		g_recs[i].next = &g_recs[(i + 1) % 3];
	}
	return middle(&g_recs[0], argc - 1);
}
