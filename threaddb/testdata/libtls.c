/* Shared library with a thread-local variable, linked at startup (static TLS, module id > 1). */
__thread int libvar = 7;
