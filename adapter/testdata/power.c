/* Power test program for the emulated (QEMU user mode) sessions. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
long total;
__attribute__((noinline)) long depth3(long x) {
	long y = x * 2 + total; /* MARK:depth3 */
	return y + 1;
}
__attribute__((noinline)) long depth2(long x) {
	long r = depth3(x + 1); /* MARK:depth2 */
	return r + 1;
}
__attribute__((noinline)) long depth1(long x) { return depth2(x + 1) + 1; }
void *worker(void *arg) {
	total += (long)arg;
	return NULL;
}
int main(void) {
	pthread_t th;
	pthread_create(&th, NULL, worker, (void *)7);
	pthread_join(th, NULL);
	long d = depth1(1); /* MARK:main */
	printf("depth %ld\n", d);
	return 0;
}
