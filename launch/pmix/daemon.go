//go:build cgo && pmix

package pmix

/*
#include <stdlib.h>
#include "pmixtool.h"
*/
import "C"

// DaemonProcs is called in a debugger daemon the launcher started (OpDaemons): it connects to
// the launcher's PMIx server on this node with what the launcher put in its environment, and
// returns the job it is to debug (PMIX_DEBUG_TARGET) and that job's processes on this node
// (PMIX_QUERY_LOCAL_PROC_TABLE), by rank, executables resolved through /proc. It disconnects
// before it returns: the daemon may exec another program then.
func DaemonProcs() (string, []Proc, error) {
	var target [256]C.char
	var cp *C.hp_proc
	var n C.size_t
	if rc := C.hp_daemon_procs(&target[0], C.size_t(len(target)), &cp, &n); rc != 0 {
		return "", nil, pmixError("debugger daemon: the local proc table of the debug target", rc)
	}
	defer C.hp_free_procs(cp, n)
	// The local proc table: every process is on this node.
	procs := goProcs(cp, n, func(string) bool { return true })
	return C.GoString(&target[0]), procs, nil
}
