/* A line of many instructions and no call, and a loop on one line, for source steps. */
#include <stdio.h>

volatile long a = 3, b = 5, c = 7, e = 11, f = 13;

int main(void)
{
	long x = 0; /* MARK:start */
	x = a * b + c * e - (f << 2) ^ a / 3 + b % 4 - c * a + e * f - b * c + a * e + (f ^ b) * (c | e); /* MARK:long */
	for (int i = 0; i < 1000; i++) x += i * a; /* MARK:loop */
	printf("%ld\n", x); /* MARK:print */
	return 0;
}
