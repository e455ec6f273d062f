/* Writes output for the output-capture tests. Modes:
 *   lines N     N numbered lines on stdout and on stderr, interleaved
 *   flood BYTES BYTES bytes on stdout, then "flood done" on stderr
 *   drip BYTES  the same, 4 KiB per write with a pause of 10 ms after each
 *   utf8        invalid bytes, then a euro sign split across two writes */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put(int fd, const char *s, size_t n) {
	while (n > 0) {
		ssize_t w = write(fd, s, n);
		if (w < 0)
			exit(3);
		s += w;
		n -= (size_t)w;
	}
}

int main(int argc, char **argv) {
	const char *rank = getenv("HPCDAP_RANK");
	if (!rank)
		rank = "?";
	if (argc == 3 && strcmp(argv[1], "lines") == 0) {
		int n = atoi(argv[2]);
		for (int i = 0; i < n; i++) {
			dprintf(1, "rank %s out %d\n", rank, i);
			dprintf(2, "rank %s err %d\n", rank, i);
		}
		return 0;
	}
	if (argc == 3 && (strcmp(argv[1], "flood") == 0 || strcmp(argv[1], "drip") == 0)) {
		int drip = strcmp(argv[1], "drip") == 0;
		long total = atol(argv[2]);
		static char buf[65536];
		for (size_t i = 0; i < sizeof buf; i++)
			buf[i] = "0123456789abcdef\n"[i % 17];
		while (total > 0) {
			size_t max = drip ? 4096 : sizeof buf;
			size_t n = total < (long)max ? (size_t)total : max;
			put(1, buf, n);
			if (drip)
				usleep(10000);
			total -= (long)n;
		}
		put(2, "flood done\n", 11);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "utf8") == 0) {
		put(1, "a\xff\xfe" "b\n", 5);
		usleep(100000);
		put(1, "x\xe2\x82", 3);
		usleep(100000);
		put(1, "\xac y\n", 4);
		return 0;
	}
	fprintf(stderr, "usage: output lines N | flood BYTES | drip BYTES | utf8\n");
	return 2;
}
