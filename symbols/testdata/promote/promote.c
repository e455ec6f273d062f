/* Integer operands of every kind C promotes differently, for the test that compares compiled
   breakpoint conditions with the evaluator. */
#include <stdbool.h>
#include <stdlib.h>

enum color { RED = -2, GREEN = 1, BLUE = 7 };
enum level { LOW, MID, HIGH };
enum wide { W0, WBIG = 0x90000000u };
enum huge { H0, HBIG = 0x9000000000000000ul };

signed char g_sc = -5;
unsigned char g_uc = 200;
char g_ch = 'x';
short g_s = -300;
unsigned short g_us = 60000;
bool g_b = true;
int g_i = -7;
unsigned g_u = 3000000000u;
long g_l = -40000000000l;
unsigned long g_ul = 18000000000000000000ul;
enum color g_ec = RED;
enum level g_el = HIGH;
enum wide g_ew = WBIG;
enum huge g_eh = HBIG;

int probe(signed char sc, unsigned char uc, short s, unsigned short us, enum level el, enum wide ew) {
	int seen = sc + uc + s + us + (int)el + (int)ew;
	return seen; /* stop here */
}

int main(void) {
	return probe(g_sc, g_uc, g_s, g_us, g_el, g_ew) == 12345 ? EXIT_FAILURE : EXIT_SUCCESS;
}
