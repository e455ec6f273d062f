package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// ReadTokenFile reads the session token from path, for an agent that a workload manager
// starts without passing the front end's environment on (a BG/Q CIOS tool, which jobctld
// starts with BG_JOBID and BG_TOOLID only). The file must be a regular file of this user's
// that no one else may read or write, and is opened without following a symbolic link.
func ReadTokenFile(path string) (string, error) {
	// O_NONBLOCK: a FIFO put there must not hold the agent before the checks refuse it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("agent: token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("agent: token file %s: %w", path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("agent: token file %s: not a regular file", path)
	case !ok || int(st.Uid) != os.Getuid():
		return "", fmt.Errorf("agent: token file %s: not owned by this user (uid %d)", path, os.Getuid())
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("agent: token file %s: mode %04o lets others read or write it; want 0600", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("agent: token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", errors.New("agent: token file " + path + ": empty")
	}
	return tok, nil
}
