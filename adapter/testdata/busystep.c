/* main stops at a breakpoint and is stepped while a second thread keeps calling cond(), where
 * a breakpoint whose condition does not hold is passed on again and again. */
#include <pthread.h>
#include <unistd.h>

volatile int sink;

__attribute__((noinline)) int cond(int v)
{
	return v + 2; /* MARK:cond */
}

static void *busy(void *arg)
{
	(void)arg;
	for (int i = 0;; i++)
		sink += cond(i);
	return NULL;
}

int main(void)
{
	pthread_t t;
	pthread_create(&t, NULL, busy, NULL);
	usleep(100000);
	int x = 0; /* MARK:hit */
	for (int i = 0; i < 100000; i++) {
		x += i;
		x ^= 3;
		x -= 1;
	}
	sink = x;
	return 0;
}
