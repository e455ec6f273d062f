package procimage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Status holds the fields of /proc/TID/status that debuggers use: the kernel's account of a
// thread's run state, its tracer and its signals.
type Status struct {
	State     byte // R, S, D, T, t, Z, X ...
	Tgid      int
	TracerPid int    // 0 when untraced
	SigBlk    uint64 // blocked signals
	SigPnd    uint64 // signals pending for the thread itself (not the process); 0 if absent
	ShdPnd    uint64 // signals pending for the process; 0 if absent
	PPid      int    // parent process id (0 if the line is absent)
}

// ReadStatus reads /proc/TID/status (a thread id, or a process id for its leader). Its errors
// name the file; one for a thread that is gone satisfies errors.Is(err, fs.ErrNotExist), or
// errors.Is(err, syscall.ESRCH) when it ended between the file's opening and its reading.
func ReadStatus(tid int) (Status, error) {
	return readStatus("/proc/" + strconv.Itoa(tid) + "/status")
}

// readStatus reads and decodes the status file at path.
func readStatus(path string) (Status, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		// The error names the file already (open /proc/TID/status: ...).
		return Status{}, fmt.Errorf("procimage: %w", err)
	}
	st, err := parseStatus(b)
	if err != nil {
		return st, fmt.Errorf("procimage: read %s: %w", path, err)
	}
	return st, nil
}

// ParseStatus decodes the "Key:\tvalue" lines of /proc/TID/status; State, Tgid, TracerPid and
// SigBlk must be there.
func ParseStatus(b []byte) (Status, error) {
	st, err := parseStatus(b)
	if err != nil {
		return st, fmt.Errorf("procimage: status: %w", err)
	}
	return st, nil
}

// parseStatus is ParseStatus, its errors not prefixed.
func parseStatus(b []byte) (Status, error) {
	var st Status
	var seen int
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		var err error
		switch string(k) {
		case "State":
			if len(v) == 0 || !(v[0] >= 'A' && v[0] <= 'Z' || v[0] >= 'a' && v[0] <= 'z') {
				return st, fmt.Errorf("State %q is not a state letter", v)
			}
			st.State = v[0]
			seen |= 1
		case "Tgid":
			st.Tgid, err = strconv.Atoi(string(v))
			seen |= 2
		case "TracerPid":
			st.TracerPid, err = strconv.Atoi(string(v))
			seen |= 4
		case "SigBlk":
			st.SigBlk, err = strconv.ParseUint(string(v), 16, 64)
			seen |= 8
		case "SigPnd", "ShdPnd":
			// Optional, like PPid.
			if n, e := strconv.ParseUint(string(v), 16, 64); e == nil {
				if string(k) == "SigPnd" {
					st.SigPnd = n
				} else {
					st.ShdPnd = n
				}
			}
		case "PPid":
			// Optional: a malformed value leaves it 0, as an absent line does.
			if n, e := strconv.Atoi(string(v)); e == nil {
				st.PPid = n
			}
		}
		if err != nil {
			return st, fmt.Errorf("%s: %w", k, err)
		}
	}
	if seen != 15 {
		return st, errors.New("missing State, Tgid, TracerPid or SigBlk")
	}
	return st, nil
}
