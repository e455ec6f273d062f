/* Creates child processes three ways, for the fork-following tests: fork + exec of
   /bin/sh -c "exit 3", posix_spawn (a vfork) of /bin/sh -c "exit 4", and a fork that exits 7
   without exec. Exits with the sum of the children's exit codes (14). */
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int status_of(pid_t p) {
    int st = 0;
    if (waitpid(p, &st, 0) != p)
        return 100;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 200;
}

int main(void) {
    int total = 0;
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/sh", "sh", "-c", "exit 3", (char *)0);
        _exit(100);
    }
    total += status_of(p);
    char *argv[] = {"sh", "-c", "exit 4", 0};
    if (posix_spawn(&p, "/bin/sh", 0, 0, argv, environ) != 0)
        return 101;
    total += status_of(p);
    p = fork();
    if (p == 0)
        _exit(7);
    total += status_of(p);
    return total;
}
