/* The innermost library of the dependency tests. */
int inner_value(void) { return 42; }
