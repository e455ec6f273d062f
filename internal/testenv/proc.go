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
