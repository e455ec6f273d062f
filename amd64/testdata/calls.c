/* Code with every kind of call gcc emits on x86-64: direct, through the PLT, through a
   pointer in a register and in memory, and a tail call, for the decoder to be checked
   against objdump. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int (*volatile hook)(int);
int (*table[2])(int);

__attribute__((noinline)) int twice(int x) { return 2 * x; }
__attribute__((noinline)) int inc(int x) { return x + 1; }

__attribute__((noinline)) int through(int (*f)(int), int x) { return f(x) + 1; }
__attribute__((noinline)) int tail(int x) { return twice(x); }

int main(int argc, char **argv) {
	hook = inc;
	table[0] = twice;
	table[1] = inc;
	char buf[64];
	memset(buf, argc, sizeof buf);
	int n = table[argc & 1](argc) + hook(argc) + through(inc, argc) + tail(argc);
	double d = argc * 1.5;
	printf("%d %f %s\n", n, d, argc > 1 ? argv[1] : "");
	return buf[3] == 7 ? EXIT_FAILURE : EXIT_SUCCESS;
}
