//go:build linux && amd64

package ptrace

import (
	"errors"
	"fmt"

	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

var errClosed = errors.New("ptrace: tracer closed")

// errClass maps a kernel error to the target error the agent turns into a CDTI return code.
// memory says whether the failing operation accessed the address space, where EFAULT and EIO
// mean an address outside the process.
func errClass(err error, exited, memory bool) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return nil
	}
	switch errno {
	case unix.ESRCH:
		if exited {
			return target.ErrExited
		}
		return target.ErrNoThread
	case unix.EFAULT, unix.EIO:
		if memory {
			return target.ErrAddress
		}
	case unix.ENOSPC:
		return target.ErrBusy
	}
	return nil
}

// wrapErr names the operation and its object: "ptrace: read memory pid 42 at 0x401000: ...".
// A kernel error is kept (errors.Is finds the errno) next to its target class.
func wrapErr(op, obj string, class, err error) error {
	switch {
	case class == nil:
		return fmt.Errorf("ptrace: %s %s: %w", op, obj, err)
	case err == nil || errors.Is(err, class):
		return fmt.Errorf("ptrace: %s %s: %w", op, obj, class)
	default:
		return fmt.Errorf("ptrace: %s %s: %w (%w)", op, obj, class, err)
	}
}
