/* Function calls in a program with a second thread: the other thread must not run during a
 * call, a call that never returns is interrupted, a breakpoint inside a called function is
 * passed over and still works afterwards. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long ticks;
volatile int stop_ticking;

static void *ticker(void *arg) {
	while (!stop_ticking)
		ticks++;
	return arg;
}

int nap(int ms) {
	usleep(ms * 1000); /* MARK: nap */
	return ms;
}

int spin(void) {
	volatile int x = 0;
	for (;;)
		x++;
	return x;
}

void end_program(int code) { exit(code); }

int main(void) {
	pthread_t t;
	pthread_create(&t, NULL, ticker, NULL);
	while (ticks < 1000)
		;
	printf("ticking\n"); /* MARK: stop */
	nap(1);
	stop_ticking = 1;
	pthread_join(t, NULL);
	printf("done %d\n", ticks > 0);
	return 0;
}
