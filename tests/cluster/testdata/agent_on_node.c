/* An agent binary that refuses to run on one node: on the node named REFUSE it says why on
 * stderr and exits with code 3; elsewhere it runs the real hpcdap (REAL) with its arguments. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
	char host[256] = "";
	(void)argc;
	gethostname(host, sizeof host - 1);
	if (strcmp(host, REFUSE) == 0) {
		fprintf(stderr, "agent on %s: refused by the test\n", host);
		return 3;
	}
	argv[0] = REAL;
	execv(REAL, argv);
	perror("execv " REAL);
	return 127;
}
