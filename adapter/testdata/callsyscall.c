/* A function called in a thread that is blocked in a system call: the call must not disturb
 * the blocked read, which completes once the other thread writes. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int fds[2];
pid_t main_tid;

int add(int a, int b) { return a + b; }

void writer_ready(void) {
	/* MARK: ready */
}

/* blocked_in_read reports whether the main thread is blocked in read(2) (from
 * /proc/self/task/TID/syscall: the system call number first). */
static int blocked_in_read(void) {
	char path[64], buf[64] = {0};
	snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)main_tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	char nr[16];
	snprintf(nr, sizeof nr, "%d ", (int)SYS_read);
	return strncmp(buf, nr, strlen(nr)) == 0;
}

static void *writer(void *arg) {
	while (!blocked_in_read())
		usleep(1000);
	writer_ready();
	write(fds[1], "x", 1);
	return arg;
}

int main(void) {
	char c = 0;
	pipe(fds);
	main_tid = (pid_t)syscall(SYS_gettid);
	pthread_t t;
	pthread_create(&t, NULL, writer, NULL);
	ssize_t n = read(fds[0], &c, 1);
	pthread_join(t, NULL);
	printf("read %zd %c\n", n, c);
	return n == 1 ? 0 : 1;
}
