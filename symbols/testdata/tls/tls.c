/* Test program for the symbols package: thread-local variables, reached through
 * the TLSResolver hook. The STOP marker and the expressions after it are as in
 * the other test programs. */
#include <stdio.h>
__thread int tls_counter = 5;
__thread double tls_scale = 2.5;
int main(void) {
	tls_counter += 37;
	tls_scale *= 2;
	printf("%d %f\n", tls_counter, tls_scale); /* STOP:tls ; tls_counter ; tls_scale ; tls_counter + 1 */
	return 0;
}
