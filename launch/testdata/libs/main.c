/* A program that needs libouter (found through DT_RPATH or DT_RUNPATH, or LD_LIBRARY_PATH). */
#include <stdio.h>
int outer_value(void);
int main(void) { printf("%d\n", outer_value()); return 0; }
