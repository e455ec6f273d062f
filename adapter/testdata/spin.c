/* A process that runs until killed, printing a tick line every 20 ms: the attach tests
 * attach to it, and see from its output whether it still runs after a detach. */
#include <stdio.h>
#include <unistd.h>

volatile long ticks;

void tick(void)
{
	ticks++; /* MARK:tick */
	printf("tick %ld\n", ticks);
	fflush(stdout);
}

int main(void)
{
	for (;;) {
		tick();
		usleep(20000); /* MARK:sleep */
	}
}
