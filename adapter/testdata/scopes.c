/* Name lookup: a block shadows its function, which shadows its file's statics, which shadow
 * the program's globals, which shadow the libraries'. Lines marked "MARK:name" are found by
 * the tests; scopes_other.c is a second compile unit of the program. */
#include <stdio.h>
#include <unistd.h>

enum color { RED, GREEN = 5, BLUE };
enum clock { daylight = 3 } mode = daylight; /* an enumerator named like a libc global */
int opterr = 5;           /* a global of the program named like a libc global */
int level = 1;            /* a global */
static int shadow = 10;   /* a file static, shadowed in main */
int gshadow = 20;         /* a global, shadowed in a block */
extern int shared_global; /* defined in scopes_other.c */

static int helper(int arg)
{
	int level = arg + 100; /* shadows the global */
	return level + shadow; /* MARK:helper */
}

int main(void)
{
	int shadow = 11;
	enum color c = GREEN;
	int total = helper(shadow); /* MARK:main-function */
	{
		int shadow = 12;
		int gshadow = 21;
		total += shadow + gshadow + c; /* MARK:main-block */
	}
	printf("total %d %d %d %d\n", total, level, opterr, shared_global);
	return 0;
}
