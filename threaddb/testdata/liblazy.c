/* Shared library loaded with dlopen: its thread-local block is allocated per thread on first use. */
__thread int lazyvar = 77;
int *lazy_addr(void) { return &lazyvar; }
