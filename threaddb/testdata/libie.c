/* Shared library loaded with dlopen after the threads exist, whose thread-local variable uses the
 * initial-exec model: it lives in the static TLS area, which threads reach through the thread
 * pointer without updating their DTV. A debugger must then find it from link_map.l_tls_offset. */
__thread int ievar __attribute__((tls_model("initial-exec"))) = 55;
int *ie_addr(void) { return &ievar; }
