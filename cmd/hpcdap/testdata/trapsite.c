/* Waits for a byte on stdin, then calls site() once and exits with 7 (1 if site ran another
 * number of times, or the read failed). */
#include <stdio.h>
#include <unistd.h>

volatile int hits;

__attribute__((noinline)) void site(void) { hits++; }

int main(void) {
	char c;
	printf("ready\n");
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return 1;
	site();
	return hits == 1 ? 7 : 1;
}
