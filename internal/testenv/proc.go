package testenv

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcStatus returns a field of /proc/PID/status (such as "TracerPid" or "State"), trimmed: the
// kernel's view of a process, independent of the code under test. It fails when the process
// is gone or the field does not exist.
func ProcStatus(pid int, field string) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("/proc/%d/status: no field %s", pid, field)
}

// ProcEnv returns one variable of a process's initial environment (/proc/PID/environ), and
// whether it is set; a process that is gone or cannot be read has none.
func ProcEnv(pid int, name string) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", false
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(name+"=")); ok {
			return string(v), true
		}
	}
	return "", false
}

// ProcMapStarts reads /proc/PID/maps and returns, for each mapped file, the start of its first
// mapping of file offset 0: where the kernel put the file's first page, which is the load bias
// of a PIE executable or shared object (both linked at address 0).
func ProcMapStarts(pid int) (map[string]uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil, err
	}
	starts := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[2] != "00000000" {
			continue
		}
		lo, _, _ := strings.Cut(f[0], "-")
		start, err := strconv.ParseUint(lo, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/maps: line %q: %v", pid, line, err)
		}
		if _, ok := starts[f[5]]; !ok {
			starts[f[5]] = start
		}
	}
	return starts, nil
}
