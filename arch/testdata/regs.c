/* Stops in stop_here with distinct values in integer, SSE and x87 registers, for the register
   table to be checked against gdb's view of the same stop. */
#include <stdio.h>

__attribute__((noinline)) double stop_here(double a, double b, long x) {
	__asm__ volatile("" ::: "memory");
	return a * b + x;
}

int main(void) {
	volatile long double e = 2.718281828459045L;
	long double f = e * e; /* leaves values in the x87 registers */
	double r = stop_here(1.5, -2.25, 0x1122334455667788L);
	printf("%f %Lf\n", r, f);
	return 0;
}
