/*
 * hpcdap-runjob: the MPIR side of the emulated Blue Gene/Q runjob. It holds the symbols a
 * tool reads and writes in runjob (BG/Q's MPIR extensions included), starts
 * `hpcdap bgq runjob ARGS...` as its child with two pipes, and does what that child asks,
 * one request per line:
 *
 *   debugged           -> "<MPIR_being_debugged>\n"
 *   tool               -> MPIR_executable_path, MPIR_server_arguments and
 *                         MPIR_subset_attach, raw (256 + 1024 + 4096 bytes)
 *   table N            -> then N lines "host\texecutable\tpid"; fills MPIR_proctable -> "ok\n"
 *   abort TEXT         -> sets MPIR_debug_abort_string -> "ok\n"
 *   break STATE        -> sets MPIR_debug_state, calls MPIR_Breakpoint -> "ok\n"
 *
 * It exits with the child's status once the child closes the request pipe. SIGTERM, SIGINT
 * and SIGHUP are passed on to the child, which ends the job first.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
char MPIR_executable_path[256];
char MPIR_server_arguments[1024];
char MPIR_subset_attach[4096];

#define MPIR_NULL 0
#define MPIR_DEBUG_SPAWNED 1
#define MPIR_DEBUG_ABORTING 2

/* MPIR_Breakpoint is where a tool plants its breakpoint; it must stay a real call. */
__attribute__((noinline, used)) void MPIR_Breakpoint(void) {
	__asm__ __volatile__("" ::: "memory");
}

static pid_t child;

/* A signal that ends runjob is passed to the emulator, which ends the job and then exits. */
static void forward(int sig) {
	if (child > 0)
		kill(child, sig);
}

static void die(const char *what) {
	fprintf(stderr, "hpcdap-runjob: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void reply(FILE *out, const char *s) {
	if (fputs(s, out) == EOF || fflush(out) == EOF)
		die("reply to the emulator");
}

/* hpcdap is $HPCDAP_BGQ_HPCDAP, else the hpcdap beside this program. */
static char *hpcdap_path(void) {
	static char path[PATH_MAX];
	const char *env = getenv("HPCDAP_BGQ_HPCDAP");
	if (env && *env)
		return (char *)env;
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - 16);
	if (n < 0)
		die("readlink /proc/self/exe");
	path[n] = 0;
	char *slash = strrchr(path, '/');
	strcpy(slash ? slash + 1 : path, "hpcdap");
	return path;
}

static void fill_table(FILE *in, long n) {
	MPIR_PROCDESC *t = calloc(n > 0 ? n : 1, sizeof *t);
	char *line = NULL;
	size_t cap = 0;
	if (!t)
		die("proc table");
	for (long i = 0; i < n; i++) {
		if (getline(&line, &cap, in) < 0)
			die("read the proc table");
		line[strcspn(line, "\n")] = 0;
		char *exe = strchr(line, '\t');
		char *pid = exe ? strchr(exe + 1, '\t') : NULL;
		if (!pid) {
			fprintf(stderr, "hpcdap-runjob: bad proc table line %ld\n", i);
			exit(1);
		}
		*exe++ = 0;
		*pid++ = 0;
		t[i].host_name = strdup(line);
		t[i].executable_name = strdup(exe);
		t[i].pid = atoi(pid);
	}
	free(line);
	MPIR_proctable = t;
	MPIR_proctable_size = (int)n;
}

int main(int argc, char **argv) {
	int req[2], rep[2];
	if (pipe(req) < 0 || pipe(rep) < 0)
		die("pipe");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		/* requests are written on fd 3, replies read on fd 4; the pipes' own descriptors
		 * may be 3 and 4, so both are first copied above them */
		int w = fcntl(req[1], F_DUPFD, 64), r = fcntl(rep[0], F_DUPFD, 64);
		if (w < 0 || r < 0 || dup2(w, 3) < 0 || dup2(r, 4) < 0)
			die("dup2");
		for (int fd = 5; fd < 128; fd++)
			close(fd);
		char **args = calloc(argc + 3, sizeof *args);
		args[0] = "hpcdap";
		args[1] = "bgq";
		args[2] = "runjob";
		for (int i = 1; i < argc; i++)
			args[i + 2] = argv[i];
		setenv("HPCDAP_BGQ_MPIR_FDS", "3,4", 1);
		char *path = hpcdap_path();
		execv(path, args);
		fprintf(stderr, "hpcdap-runjob: exec %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	close(req[1]);
	close(rep[0]);
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = {0};
	sa.sa_handler = forward;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	FILE *in = fdopen(req[0], "r"), *out = fdopen(rep[1], "w");
	if (!in || !out)
		die("fdopen");
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, in) >= 0) {
		line[strcspn(line, "\n")] = 0;
		char buf[64];
		if (strcmp(line, "debugged") == 0) {
			snprintf(buf, sizeof buf, "%d\n", MPIR_being_debugged);
			reply(out, buf);
		} else if (strcmp(line, "tool") == 0) {
			if (fwrite(MPIR_executable_path, 1, sizeof MPIR_executable_path, out) != sizeof MPIR_executable_path ||
			    fwrite(MPIR_server_arguments, 1, sizeof MPIR_server_arguments, out) != sizeof MPIR_server_arguments ||
			    fwrite(MPIR_subset_attach, 1, sizeof MPIR_subset_attach, out) != sizeof MPIR_subset_attach ||
			    fflush(out) == EOF)
				die("reply to the emulator");
		} else if (strncmp(line, "table ", 6) == 0) {
			fill_table(in, atol(line + 6));
			reply(out, "ok\n");
		} else if (strncmp(line, "abort ", 6) == 0) {
			MPIR_debug_abort_string = strdup(line + 6);
			reply(out, "ok\n");
		} else if (strncmp(line, "break ", 6) == 0) {
			MPIR_debug_state = atoi(line + 6);
			MPIR_Breakpoint();
			reply(out, "ok\n");
		} else {
			fprintf(stderr, "hpcdap-runjob: unknown request %s\n", line);
			reply(out, "error\n");
		}
	}
	int status;
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			die("wait for the emulator");
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
