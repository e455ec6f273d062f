//go:build !(cgo && pmix)

package pmix

import (
	"io"
	"os"
)

// Built reports whether this binary holds the PMIx tool.
const Built = false

// ServeTool would serve the tool protocol; without libpmix it fails at once.
func ServeTool(stdin io.Reader, events *os.File) error {
	return ErrNotBuilt
}

// DaemonProcs would read a debugger daemon's target and local processes; without libpmix it
// fails at once.
func DaemonProcs() (string, []Proc, error) {
	return "", nil, ErrNotBuilt
}
