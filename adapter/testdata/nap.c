/* A process that says it is ready and then sleeps in libc until killed: a pause always finds
 * it inside libc's sleep, whose source is not on this machine. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
	printf("napping\n");
	fflush(stdout);
	for (;;)
		sleep(60); /* MARK:nap */
}
