/* Test program for the symbols package: C types, values and call stacks.
 *
 * Lines carrying a STOP marker are where the differential tests stop the
 * program under gdb; the expressions after the marker (separated by ';') are
 * printed by gdb and by the package. */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum color { RED, GREEN = 5, BLUE };
enum flags { F_A = 1, F_B = 2, F_C = 4 };
typedef unsigned int uint;
typedef struct point { int x, y; } point_t;

struct bits {
	unsigned a : 3;
	signed b : 5;
	unsigned c : 1;
	int d;
	unsigned long long e : 40;
	_Bool f : 1;
};

union number {
	int i;
	float f;
	unsigned char bytes[4];
};

struct node {
	int value;
	struct node *next;
	const char *label;
};

struct everything {
	char c;
	signed char sc;
	unsigned char uc;
	short s;
	unsigned short us;
	int i;
	uint u;
	long l;
	unsigned long ul;
	long long ll;
	float f;
	double d;
	long double ld;
	_Bool b;
	enum color col;
	enum flags fl;
	point_t pt;
	struct point pts[3];
	union number num;
	struct bits bf;
	char name[16];
	int matrix[2][3];
	int *ip;
	void *vp;
	int (*fn)(int);
	const volatile int cv;
	int8_t i8;
	uint64_t u64;
	double _Complex z;
};

int g_counter = 42;
static double s_ratio = 0.25;
const char *g_greeting = "hello, world";
char g_buf[64] = "buffer";
int g_big[300];
short g_zeros[20];
struct everything g_all;
struct node g_nodes[4];
static struct node *s_head;
enum color g_color = BLUE;
enum flags g_flags = F_A | F_C;
volatile int g_sink;

__attribute__((noinline)) static int square(int v)
{
	int r = v * v;
	g_sink = r; /* STOP:square ; v ; r ; v * 3 + 1 ; g_counter */
	return r;
}

__attribute__((noinline)) int apply(int (*fn)(int), int v)
{
	int out = fn(v);
	return out + 1;
}

static inline int twice(int v)
{
	int t = v + v;
	g_sink = t;
	return t;
}

__attribute__((noinline)) void fill(struct everything *e, int seed)
{
	e->c = 'A';
	e->sc = -5;
	e->uc = 200;
	e->s = -1234;
	e->us = 65000;
	e->i = seed;
	e->u = 4000000000u;
	e->l = -9000000000L;
	e->ul = 18000000000000000000UL;
	e->ll = -42;
	e->f = 3.25f;
	e->d = 2.718281828459045;
	e->ld = 1.5L;
	e->b = true;
	e->col = GREEN;
	e->fl = F_B | F_C;
	e->pt.x = 10;
	e->pt.y = -20;
	for (int k = 0; k < 3; k++) {
		e->pts[k].x = k;
		e->pts[k].y = k * k;
	}
	e->num.f = 1.0f;
	e->bf.a = 5;
	e->bf.b = -7;
	e->bf.c = 1;
	e->bf.d = 99;
	e->bf.e = 0x123456789aULL;
	e->bf.f = 1;
	strcpy(e->name, "everything");
	for (int r = 0; r < 2; r++)
		for (int c = 0; c < 3; c++)
			e->matrix[r][c] = r * 10 + c;
	e->ip = &g_counter;
	e->vp = e;
	e->fn = square;
	e->i8 = -8;
	e->u64 = 0xfedcba9876543210ULL;
	e->z = 1.5 + 2.0 * __builtin_complex(0.0, 1.0);
	g_sink = e->i; /* STOP:fill ; e->c ; e->pt ; *e->ip ; e->matrix[1] ; e->matrix[1][2] ; e->name ; e->bf ; e->num ; e->pts[2].y ; e->col ; e->fl ; &e->pt ; (char)e->i ; e->f * 2 ; e->i > 3 && e->b */
}

__attribute__((noinline)) int walk(struct node *n, int depth)
{
	if (n == NULL) {
		int total = depth * 100; /* STOP:walk ; depth ; n ; s_head->label ; *s_head ; s_head->next->next->value */
		return total;
	}
	return walk(n->next, depth + 1) + n->value;
}

static volatile sig_atomic_t got_signal;

static void handler(int sig)
{
	got_signal = sig; /* STOP:handler ; sig ; got_signal */
}

__attribute__((noinline)) int compute(int n)
{
	int acc = 0;
	for (int i = 0; i < n; i++) {
		int tw = twice(i);
		acc += tw; /* STOP:compute ; i ; acc ; tw */
	}
	return acc;
}

struct stats {
	double mean;
	double max;
	int n;
};

static inline double clamp(double v, double lo, double hi)
{
	double r = v < lo ? lo : (v > hi ? hi : v);
	g_sink = (int)r; /* STOP:clamp ; v ; lo ; hi ; r ; v - lo */
	return r;
}

__attribute__((noinline)) struct stats summarize(const double *vals, int n, struct point origin)
{
	struct stats s = {0, -1e300, 0};
	for (int i = 0; i < n; i++) {
		double c = clamp(vals[i] - origin.x, -100.0, 100.0);
		s.mean += c;
		if (c > s.max)
			s.max = c;
		s.n++;
	}
	s.mean /= n;
	g_sink = s.n; /* STOP:summarize ; s ; s.mean ; origin ; vals[1] ; n ; s.max > 50 */
	return s;
}

int main(int argc, char **argv)
{
	struct everything local;
	char text[] = "local text";
	const char *msg = "message";
	int numbers[5] = {1, 2, 3, 4, 5};
	double ratio = s_ratio * 2;
	bool flag = argc > 0;
	uint count = 7;
	point_t origin = {0, 0};
	memset(&local, 0, sizeof local);
	for (int i = 0; i < 300; i++)
		g_big[i] = i < 10 ? 1 : i;
	for (int i = 0; i < 4; i++) {
		g_nodes[i].value = i * 11;
		g_nodes[i].next = i < 3 ? &g_nodes[i + 1] : NULL;
		g_nodes[i].label = i % 2 ? "odd" : "even";
	}
	s_head = &g_nodes[0];
	fill(&local, argc + 3);
	fill(&g_all, 17);
	g_sink = apply(square, numbers[2]);
	g_sink = walk(s_head, 0);
	g_sink = compute(3);
	double vals[4] = {1.5, -2.25, 300.0, 7.0};
	struct stats st = summarize(vals, argc + 3, origin);
	g_sink = st.n;
	signal(SIGUSR1, handler);
	raise(SIGUSR1);
	g_sink = (int)ratio + flag + count + origin.x + strlen(text) + strlen(msg); /* STOP:main ; argc ; argv[0][0] ; text ; numbers ; numbers[1] + numbers[2] ; g_greeting ; *g_greeting ; g_buf ; g_big[299] ; s_ratio ; g_color ; g_flags ; g_nodes[1].label ; &g_counter ; *&g_counter ; -numbers[4] ; !flag ; sizeof(int) ; (long)ratio ; ratio / 3 ; count % 4 ; g_counter == 42 || argc < 0 ; local.pt.x - local.pt.y ; g_big ; g_zeros ; square ; g_nodes ; s_head ; *argv@argc ; GREEN ; (unsigned char)200 ; 1.5 + 2 ; 10 / 3 ; -7 % 3 ; 1 << 4 ; g_all.z ; g_all.ld ; &g_nodes[2] ; g_nodes[1].next->label ; numbers[1] == 2 ; $pc ; g_all.bf.b + 1 ; g_all.u + 1 ; g_all.sc * 2 ; numbers + 1 ; *(numbers + 2) ; &numbers[3] - &numbers[0] ; g_all.fn ; nosuchvar ; g_all.nosuch ; set g_counter = 7 ; set local.pt.x = 99 ; set g_all.bf.b = -3 ; set ratio = 7 ; set g_all.c = 66 ; set numbers[2] = numbers[1] * 10 ; set g_all.f = 2.5 ; set count += 5 ; set g_buf[0] = 'B' */
	printf("%d %s\n", g_sink, argv[0]);
	return 0;
}
