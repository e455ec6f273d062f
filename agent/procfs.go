package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	perms      string // "r-xp", "rw-s", ...
	path       string // file, "[heap]", "[stack]", "" for anonymous memory
}

func (m mapping) shared() bool { return len(m.perms) == 4 && m.perms[3] == 's' }

// readMaps parses /proc/PID/maps.
func readMaps(pid int) ([]mapping, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil, err
	}
	return parseMaps(b)
}

// parseMaps parses the text of /proc/PID/maps.
func parseMaps(b []byte) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("maps line %q: too few fields", line)
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps line %q: bad range", line)
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end < start {
			return nil, fmt.Errorf("maps line %q: bad range", line)
		}
		m := mapping{start: start, end: end, perms: f[1], path: afterFields(line, 5)}
		out = append(out, m)
	}
	return out, sc.Err()
}

// afterFields returns what follows the first n space-separated fields of line, trimmed: the
// path of a maps line, which may itself contain spaces.
func afterFields(line string, n int) string {
	rest := line
	for range n {
		rest = strings.TrimLeft(rest, " \t")
		i := strings.IndexAny(rest, " \t")
		if i < 0 {
			return ""
		}
		rest = rest[i:]
	}
	return strings.TrimSpace(rest)
}

// findMapping returns the mapping holding addr and its index.
func findMapping(ms []mapping, addr uint64) (mapping, int, bool) {
	for i, m := range ms {
		if addr >= m.start && addr < m.end {
			return m, i, true
		}
	}
	return mapping{}, -1, false
}

// memoryLayout summarises the maps for GetProcessData. End addresses are inclusive (the last
// byte), as the CNK reports them. The heap is the [heap] mapping (its end is the program
// break); the mmap range spans the anonymous and file mappings that are neither the program's
// own image, the heap, nor a special kernel mapping.
type memoryLayout struct {
	heapStart, heapEnd, heapBreak uint64
	mmapStart, mmapEnd            uint64
}

func layoutOf(ms []mapping, exe string) memoryLayout {
	var l memoryLayout
	for _, m := range ms {
		switch {
		case m.path == "[heap]":
			l.heapStart, l.heapEnd, l.heapBreak = m.start, m.end-1, m.end
		case strings.HasPrefix(m.path, "[") || (exe != "" && m.path == exe):
		default:
			if l.mmapStart == 0 || m.start < l.mmapStart {
				l.mmapStart = m.start
			}
			if m.end-1 > l.mmapEnd {
				l.mmapEnd = m.end - 1
			}
		}
	}
	return l
}

// taskStat holds the fields of /proc/PID/task/TID/stat the agent reports.
type taskStat struct {
	state     byte  // R, S, D, T, t, Z, ...
	processor int   // CPU last run on
	startTime int64 // clock ticks after boot
}

// readTaskStat reads /proc/PID/task/TID/stat.
func readTaskStat(pid, tid int) (taskStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return taskStat{}, err
	}
	return parseStat(b)
}

// parseStat parses a stat line: the command name is in parentheses and may hold anything, so
// fields are counted from the last ')'.
func parseStat(b []byte) (taskStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return taskStat{}, fmt.Errorf("stat: no command name")
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); starttime is field 22, processor field 39.
	if len(f) < 37 {
		return taskStat{}, fmt.Errorf("stat: %d fields", len(f)+2)
	}
	st := taskStat{state: f[0][0]}
	st.startTime, _ = strconv.ParseInt(f[19], 10, 64)
	st.processor, _ = strconv.Atoi(f[36])
	return st, nil
}

// clockTicks is USER_HZ, the unit of /proc stat times; Linux fixes it at 100 on every
// architecture the agent supports.
const clockTicks = 100

// processAge is how long the process has run (the CNK's jobTime: time since the job started).
func processAge(pid int) (time.Duration, error) {
	st, err := readTaskStat(pid, pid)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/uptime: empty")
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, err
	}
	age := time.Duration(up*float64(time.Second)) - time.Duration(st.startTime)*time.Second/clockTicks
	return max(age, 0), nil
}

// wchan reads /proc/PID/task/TID/wchan: the kernel function a sleeping thread waits in.
func wchan(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/wchan", pid, tid))
	if err != nil {
		return ""
	}
	return string(b)
}
