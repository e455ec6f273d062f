/* Every rank sleeps until the same instant ($WAKE_MS, milliseconds of CLOCK_REALTIME) and then
 * calls hit() once, so that several ranks reach a breakpoint there at the same time. */
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) int hit(int v)
{
	return v + 1; /* MARK:cohit */
}

int main(void)
{
	long long wake = atoll(getenv("WAKE_MS"));
	struct timespec at = { .tv_sec = wake / 1000, .tv_nsec = (wake % 1000) * 1000000 };
	while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL) != 0)
		;
	return hit(0) == 1 ? 0 : 1;
}
