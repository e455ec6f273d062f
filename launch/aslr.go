package launch

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartNoASLR starts cmd with address-space randomisation disabled for it and its descendants
// (personality ADDR_NO_RANDOMIZE), as debuggers run programs by default, so that every rank of
// one binary has the same addresses. The personality is set on a locked thread for the fork
// only: this process's own image is unaffected. Where the kernel refuses, cmd starts as usual.
func StartNoASLR(cmd *exec.Cmd) error { return withNoASLR(cmd.Start) }

// withNoASLR runs start, which forks on the calling goroutine (exec.Cmd.Start does), on a
// locked thread whose personality has ADDR_NO_RANDOMIZE set for the duration, so that the
// process it starts, and that process's descendants, run without address-space randomisation.
func withNoASLR(start func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, _, errno := syscall.RawSyscall(syscall.SYS_PERSONALITY, 0xffffffff, 0, 0)
	if errno != 0 {
		return start()
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PERSONALITY, old|addrNoRandomize, 0, 0); errno != 0 {
		return start()
	}
	defer syscall.RawSyscall(syscall.SYS_PERSONALITY, old, 0, 0)
	return start()
}

// addrNoRandomize is the personality flag ADDR_NO_RANDOMIZE (linux/personality.h).
const addrNoRandomize = 0x0040000
