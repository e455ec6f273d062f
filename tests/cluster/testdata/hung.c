/* A hung job without MPI, quick to start at a thousand ranks: each rank (SLURM_PROCID) says
   it blocks, then waits forever for something nobody gives it. Rank pairs wait in different
   calls, so that their merged stacks branch: pair p = rank/2 waits, by p % 4, for a peer's
   byte on a pipe nobody writes (wait_for_peer → read), for a signal (wait_for_signal →
   pause), for an event (wait_for_event → poll), or, one call deeper, for a lock
   (wait_for_lock → spin_on_lock → select). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <unistd.h>

__attribute__((noinline)) void wait_for_peer(void) {
    int fds[2];
    char c;
    if (pipe(fds) != 0)
        abort();
    read(fds[0], &c, 1); /* MARK: read */
}

__attribute__((noinline)) void wait_for_signal(void) {
    pause(); /* MARK: pause */
}

__attribute__((noinline)) void wait_for_event(void) {
    poll(NULL, 0, -1); /* MARK: poll */
}

__attribute__((noinline)) void spin_on_lock(void) {
    select(0, NULL, NULL, NULL, NULL); /* MARK: select */
}

__attribute__((noinline)) void wait_for_lock(void) {
    spin_on_lock(); /* MARK: lock */
}

int main(void) {
    const char *id = getenv("SLURM_PROCID");
    int rank = id ? atoi(id) : 0;
    printf("rank %d blocking\n", rank);
    fflush(stdout);
    for (;;) {
        switch ((rank / 2) % 4) {
        case 0: wait_for_peer(); break;
        case 1: wait_for_signal(); break;
        case 2: wait_for_event(); break;
        default: wait_for_lock(); break;
        }
    }
}
