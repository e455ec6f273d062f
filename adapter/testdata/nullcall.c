/* Calls through a null function pointer: the program faults at pc 0, its caller's return
   address on the stack top. */
#include <stdio.h>

void (*volatile hook)(int);

__attribute__((noinline)) void call_hook(int x)
{
	hook(x); /* MARK:call-hook */
	printf("not reached\n");
}

int main(void)
{
	call_hook(7); /* MARK:main-call */
	return 0;
}
