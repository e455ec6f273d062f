//go:build cgo && pmix

package pmix

/*
#include <stdlib.h>
#include "pmixtool.h"
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"unsafe"
)

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
	procs := make([]Proc, 0, int(n))
	for _, p := range unsafe.Slice(cp, int(n)) {
		pr := Proc{Rank: int(p.rank), Host: C.GoString(p.host), Pid: int(p.pid), Executable: C.GoString(p.exe)}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pr.Pid)); err == nil {
			pr.Executable = exe
		}
		procs = append(procs, pr)
	}
	slices.SortFunc(procs, func(a, b Proc) int { return a.Rank - b.Rank })
	return C.GoString(&target[0]), procs, nil
}
