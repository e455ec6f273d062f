/* A hot loop for the conditional-breakpoint benchmark: f is called 20,000 times. */
#include <stdio.h>

volatile long sink;

void f(int i)
{
	sink += i; /* MARK:f-body */
}

int main(void)
{
	for (int i = 0; i < 20000; i++)
		f(i);
	printf("sink %ld\n", sink);
	return 0;
}
