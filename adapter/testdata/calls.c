/* Functions the tests call from expressions (evaluate "add(2, 3)"), compared with gdb's
 * print of the same calls and with the results the program computes itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int counter = 3;
const char *greeting = "hello, world";
enum color { RED, GREEN = 5, BLUE };

int add(int a, int b) { return a + b; }
long scale(long x, char c, short s, _Bool neg) { return neg ? -(x * c + s) : x * c + s; }
double mix(double a, float b, int k) { return a * k + b; }
float halve(float f) { return f / 2; }
int bump(int by) { counter += by; return counter; }
int twice(int x) { return 2 * x; }
int color_value(enum color c) { return (int)c * 10; }
size_t length(const char *s) { return strlen(s); }
int crash(int *p) { return *p + 1; }
void reset(void) { counter = 0; }
int many(int a, int b, int c, int d, int e, int f, int g, int h) {
	return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}
int (*op)(int, int) = add; /* on ELFv1, a pointer to add's descriptor */

struct pair {
	int a, b;
};
struct pair origin = {1, 2};
struct pair make_pair(int a) { struct pair p = {a, counter}; return p; }
int pair_sum(struct pair p) { return p.a + p.b; }
double fsum(double a, double b, double c, double d, double e, double f, double g, double h, double i, double j) {
	return a + b + c + d + e + f + g + h + i + 2 * j;
}

/* What the program's own calls return, to compare with calls made from expressions. */
double mix_native, fsum_native;
float halve_native;

int main(void) {
	char name[16] = "abcdefg";
	int local = 7;
	double ratio = 1.5;
	int rank_id = getenv("HPCDAP_RANK") ? atoi(getenv("HPCDAP_RANK")) : 0;
	mix_native = mix(ratio, 0.25f, 3);
	halve_native = halve(ratio);
	fsum_native = fsum(1, 2, 3, 4, 5, 6, 7, 8, 9, 10);
	origin = make_pair(pair_sum(origin));
	printf("start %d %d\n", add(local, 1), rank_id); /* MARK: stop */
	printf("counter %d %s %g\n", counter, name, ratio);
	return 0;
}
