/* A non-MPI program: prints its host and pid, then sleeps argv[1] seconds (default 0). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    char host[256];
    gethostname(host, sizeof host);
    printf("host %s pid %d\n", host, (int)getpid());
    fflush(stdout);
    if (argc > 1)
        sleep(atoi(argv[1]));
    return 0;
}
