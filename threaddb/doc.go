// Package threaddb maps a glibc program's threads the way glibc's libthread_db does, in pure Go
// and without loading libthread_db: it decodes the _thread_db_* descriptors glibc exports for
// debuggers (from libc.so.6's .dynsym, or a static executable's .symtab), walks the thread lists
// in target memory, and maps pthread_t to LWP and back. It also reads thread-specific data
// (pthread_getspecific for a key) and locates a module's TLS block for a thread, which serves
// DWARF's DW_OP_form_tls_address.
//
// Target memory and registers come through two small interfaces, Memory and Threads, so the same
// code works over CDTI GetMemory, against a live Linux process, a core file, QEMU's GDB stub, or a
// Blue Gene/Q compute node. The target description (machine, byte order, pointer size) comes
// from the ELF files. x86_64 and ppc64 (big- and little-endian) are supported.
//
// The layout comes from the descriptors, so no glibc version is compiled in. A few facts glibc
// keeps out of the descriptors are built in per machine: the ppc64 thread pointer's 0x7000 bias,
// the l_tls_offset sentinels, and the cancelhandling bits. The walk follows glibc 2.34 and later
// (list heads in ld.so's _rtld_global, reached through libc's __nptl_rtld_global, or plain
// variables in static programs); older layouts are tried through their symbol names but have
// not been verified.
//
// A typical session:
//
//	p, err := threaddb.Open(pid, modules, mem, threads) // modules: the link map, with load biases
//	list, err := p.List()                                // every call reads the lists afresh
//	for _, t := range list.Threads { ... t.LWP, t.Pthread, t.StartRoutine ... }
//	addr, err := p.TLSAddress(t, module, offset)         // DW_OP_form_tls_address
package threaddb
