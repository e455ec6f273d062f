package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Finding this host's processes by the program they run, for an attach by name.

// ProcessMatch is a process of this host that runs a program.
type ProcessMatch struct {
	Pid int
	Exe string // the executable's path, as /proc/PID/exe gives it
}

// matchesName reports whether an executable path is the program name designates: its path
// when name holds a slash (made absolute), else its base name.
func matchesName(exe, name string) bool {
	exe = strings.TrimSuffix(exe, " (deleted)")
	if strings.Contains(name, "/") {
		abs, err := filepath.Abs(name)
		return err == nil && filepath.Clean(exe) == abs
	}
	return filepath.Base(exe) == name
}

// procExe returns the executable of a process ("" when it is gone or not ours to read).
func procExe(pid int) string {
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return exe
}

// procPids lists the process ids of this host.
func procPids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// ProcessesNamed returns this host's processes that run the program name — an executable's
// base name, or with a slash its path — except this process, by pid. Processes whose
// executable cannot be read (other users') are not seen.
func ProcessesNamed(name string) ([]ProcessMatch, error) {
	if name == "" {
		return nil, fmt.Errorf("processes named \"\": no name")
	}
	pids, err := procPids()
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []ProcessMatch
	for _, pid := range pids {
		if pid == self {
			continue
		}
		if exe := procExe(pid); exe != "" && matchesName(exe, name) {
			out = append(out, ProcessMatch{Pid: pid, Exe: exe})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out, nil
}

// waitPoll is how often WaitForProcess looks at the process table.
const waitPoll = 2 * time.Millisecond

// youngFor is how long a new process is looked at again: a process is seen first as its
// parent's fork and runs the program only after its exec.
const youngFor = 5 * time.Second

// WaitForProcess waits until a process that runs the program name starts (one running when
// it is called does not count) and returns it; several starting at once are an error naming
// them. It ends with ctx. waiting, when not nil, is called once the processes running before
// are known: a process started after it is seen.
func WaitForProcess(ctx context.Context, name string, waiting func()) (ProcessMatch, error) {
	if name == "" {
		return ProcessMatch{}, fmt.Errorf("wait for a process named \"\": no name")
	}
	old := map[int]bool{}
	pids, err := procPids()
	if err != nil {
		return ProcessMatch{}, err
	}
	for _, pid := range pids {
		old[pid] = true
	}
	if waiting != nil {
		waiting()
	}
	young := map[int]time.Time{} // new processes not (yet) running the program: first seen
	tick := time.NewTicker(waitPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ProcessMatch{}, fmt.Errorf("wait for a process named %q: %w", name, context.Cause(ctx))
		case <-tick.C:
		}
		pids, err := procPids()
		if err != nil {
			return ProcessMatch{}, err
		}
		now := time.Now()
		var found []ProcessMatch
		for _, pid := range pids {
			if old[pid] {
				continue
			}
			first, seen := young[pid]
			if !seen {
				young[pid], first = now, now
			}
			if exe := procExe(pid); exe != "" && matchesName(exe, name) {
				found = append(found, ProcessMatch{Pid: pid, Exe: exe})
			} else if now.Sub(first) > youngFor {
				old[pid] = true
				delete(young, pid)
			}
		}
		switch len(found) {
		case 0:
		case 1:
			return found[0], nil
		default:
			return ProcessMatch{}, fmt.Errorf("wait for a process named %q: %d started at once (%s): attach them by \"pids\"",
				name, len(found), pidList(found))
		}
	}
}

// pidList prints matches as "pid 12 (/bin/x), pid 13 (/bin/x)".
func pidList(ms []ProcessMatch) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("pid %d (%s)", m.Pid, m.Exe))
	}
	return strings.Join(parts, ", ")
}

// ProcessNamed returns the one process of this host that runs the program name, or an error
// saying there is none or naming each of several.
func ProcessNamed(name string) (ProcessMatch, error) {
	ms, err := ProcessesNamed(name)
	if err != nil {
		return ProcessMatch{}, err
	}
	switch len(ms) {
	case 0:
		return ProcessMatch{}, fmt.Errorf("no process of this host runs %q", name)
	case 1:
		return ms[0], nil
	}
	return ProcessMatch{}, fmt.Errorf("%d processes run %q (%s): attach one by \"pid\", or them all as ranks by \"pids\"",
		len(ms), name, pidList(ms))
}

// ProcessExists reports whether a process of this pid runs on this host (as /proc shows it).
func ProcessExists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return pid > 0 && err == nil
}

// statFields returns the fields of /proc/PID/stat after the command name, the state first,
// or nil when the process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// tracedBy returns the pid of the process that traces pid, or 0.
func tracedBy(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// parentOf returns pid's parent, from /proc.
func parentOf(pid int) (int, bool) {
	f := statFields(pid)
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
