/*
 * polling_starter: a starter that, as BG/Q's runjob does, polls MPIR_being_debugged while its
 * job runs and, when a tool has set it, fills its proc table and calls MPIR_Breakpoint with
 * MPIR_DEBUG_SPAWNED. It polls when its child asks, every argv[1] milliseconds, blocked in
 * read(2) in between as runjob's MPIR side is, and runs until it is killed. Its one "rank" is
 * its child.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	const char *host_name;
	const char *executable_name;
	int pid;
} MPIR_PROCDESC;

MPIR_PROCDESC *MPIR_proctable;
int MPIR_proctable_size;
volatile int MPIR_debug_state;
volatile int MPIR_being_debugged;
const char *MPIR_debug_abort_string;
int MPIR_i_am_starter = 1;

#define MPIR_DEBUG_SPAWNED 1

__attribute__((noinline, used)) void MPIR_Breakpoint(void) {
	__asm__ __volatile__("" ::: "memory");
}

static MPIR_PROCDESC table[1] = {{"localhost", "polling_starter", 0}};

int main(int argc, char **argv) {
	long ms = argc > 1 ? atol(argv[1]) : 100;
	struct timespec poll = {ms / 1000, (ms % 1000) * 1000000L};
	int req[2], debugged = 0;
	char c;
	if (pipe(req) < 0)
		return 1;
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;) {
			nanosleep(&poll, NULL);
			if (write(req[1], "p", 1) != 1)
				_exit(0);
		}
	}
	table[0].pid = child;
	while (read(req[0], &c, 1) == 1) {
		if (MPIR_being_debugged && !debugged) {
			MPIR_proctable = table;
			MPIR_proctable_size = 1;
			MPIR_debug_state = MPIR_DEBUG_SPAWNED;
			MPIR_Breakpoint();
		}
		debugged = MPIR_being_debugged;
	}
	return 1;
}
