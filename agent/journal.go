package agent

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The trap journal lets a process other than the agent undo the agent's traps after the agent
// died without doing so (SIGKILL): the kernel detaches a dead tracer's processes but leaves
// its trap instructions in their text. The agent (Config.Journal) writes one line before it
// plants a trap and one after it has put the original bytes back:
//
//	trap PID ADDR ORIGHEX
//	clear PID ADDR
//
// A supervisor (`hpcdap agent --supervise`) reads the journal from a pipe as the agent writes
// it, and when the agent dies writes the original bytes of every trap still planted through
// /proc/PID/mem, which needs no tracer: the kernel lets a process with ptrace access write a
// process's text there, running or stopped.

// journal writes trap records; a nil journal writes nothing.
type journal struct {
	mu sync.Mutex
	w  io.Writer
}

func (j *journal) record(format string, args ...any) {
	if j == nil || j.w == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	// One short line per write: a pipe delivers it whole.
	fmt.Fprintf(j.w, format+"\n", args...)
}

// trap records that the trap at addr of process pid is about to be planted over orig.
func (j *journal) trap(pid int, addr uint64, orig []byte) {
	j.record("trap %d %#x %s", pid, addr, hex.EncodeToString(orig))
}

// clear records that the original bytes at addr of process pid are back.
func (j *journal) clear(pid int, addr uint64) {
	j.record("clear %d %#x", pid, addr)
}

// TrapSite is a trap the journal says is planted: the bytes to put back at Addr of process Pid.
type TrapSite struct {
	Pid  int
	Addr uint64
	Orig []byte
}

// TrapJournal is the supervisor's side of the journal: the traps planted so far.
type TrapJournal struct {
	mu    sync.Mutex
	sites map[[2]uint64][]byte // (pid, addr) → original bytes
}

// NewTrapJournal returns an empty journal.
func NewTrapJournal() *TrapJournal { return &TrapJournal{sites: map[[2]uint64][]byte{}} }

// Read applies the records of r until it ends (the agent's end of the pipe is closed).
// Malformed lines are reported and skipped.
func (tj *TrapJournal) Read(r io.Reader) error {
	var errs []error
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if err := tj.apply(sc.Text()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("agent: trap journal: %w", err))
	}
	return errors.Join(errs...)
}

func (tj *TrapJournal) apply(line string) error {
	f := strings.Fields(line)
	bad := func() error { return fmt.Errorf("agent: trap journal: bad record %q", line) }
	if len(f) < 3 {
		return bad()
	}
	pid, err1 := strconv.Atoi(f[1])
	addr, err2 := strconv.ParseUint(f[2], 0, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return bad()
	}
	key := [2]uint64{uint64(pid), addr}
	tj.mu.Lock()
	defer tj.mu.Unlock()
	switch {
	case f[0] == "trap" && len(f) == 4:
		orig, err := hex.DecodeString(f[3])
		if err != nil || len(orig) == 0 {
			return bad()
		}
		tj.sites[key] = orig
	case f[0] == "clear" && len(f) == 3:
		delete(tj.sites, key)
	default:
		return bad()
	}
	return nil
}

// Planted lists the traps still planted, by pid and address.
func (tj *TrapJournal) Planted() []TrapSite {
	tj.mu.Lock()
	defer tj.mu.Unlock()
	out := make([]TrapSite, 0, len(tj.sites))
	for k, orig := range tj.sites {
		out = append(out, TrapSite{Pid: int(k[0]), Addr: k[1], Orig: orig})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pid != out[j].Pid {
			return out[i].Pid < out[j].Pid
		}
		return out[i].Addr < out[j].Addr
	})
	return out
}

// Restore writes back the original bytes of every trap still planted, through /proc/PID/mem,
// and returns the sites restored and an error naming each site that could not be (a process
// that has ended is not one).
func (tj *TrapJournal) Restore() ([]TrapSite, error) {
	var done []TrapSite
	var errs []error
	for _, s := range tj.Planted() {
		f, err := os.OpenFile("/proc/"+strconv.Itoa(s.Pid)+"/mem", os.O_RDWR, 0)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("agent: restore the text of pid %d at %#x: %w", s.Pid, s.Addr, err))
			}
			continue
		}
		_, err = f.WriteAt(s.Orig, int64(s.Addr))
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("agent: restore the text of pid %d at %#x: %w", s.Pid, s.Addr, err))
			continue
		}
		done = append(done, s)
	}
	return done, errors.Join(errs...)
}
