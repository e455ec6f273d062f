/* A library that needs libinner (found through its own DT_RUNPATH, $ORIGIN). */
int inner_value(void);
int outer_value(void) { return inner_value() + 1; }
