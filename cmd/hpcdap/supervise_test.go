package main

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// An agent attached to a running program plants a breakpoint on a function the program has
// not reached yet, and is then killed with SIGKILL. Unsupervised, the int3 stays in the text
// and the program dies of SIGTRAP when it reaches the function (what README's "What a crash
// leaves" says). With --supervise, the killed process is the agent's worker: its supervisor
// puts the original instruction back from the worker's trap journal, says so, and the program
// runs past the function to its own exit code.
func TestAgentKilledTraps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("attaching to a sibling process needs root")
	}
	bin := filepath.Join(t.TempDir(), "hpcdap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	prog := filepath.Join(t.TempDir(), "trapsite")
	if out, err := exec.Command("gcc", "-g", "-O0", "-no-pie", "-o", prog, "testdata/trapsite.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	site := symbolAddr(t, prog, "site")
	t.Run("unsupervised", func(t *testing.T) {
		st := killAgentAtTrap(t, bin, prog, site, false)
		if !st.Signaled() || st.Signal() != syscall.SIGTRAP {
			t.Errorf("program ended %v, want killed by SIGTRAP (the trap left in its text)", st)
		}
	})
	t.Run("supervised", func(t *testing.T) {
		st := killAgentAtTrap(t, bin, prog, site, true)
		if st.Signaled() || st.ExitStatus() != 7 {
			t.Errorf("program ended %v, want exit status 7 (it ran past the restored breakpoint)", st)
		}
	})
}

// killAgentAtTrap runs prog, attaches an agent (supervised or not) that plants a breakpoint at
// site, kills the agent (its worker, when supervised) with SIGKILL, lets prog go on to site,
// and returns how prog ended.
func killAgentAtTrap(t *testing.T, bin, prog string, site uint64, supervised bool) syscall.WaitStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := exec.Command(prog)
	in, _ := p.StdinPipe()
	out, _ := p.StdoutPipe()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Process.Kill()
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("program: %q, %v", l, err)
	}
	orig := readMem(t, p.Process.Pid, site)

	args := []string{"agent", "--listen", "127.0.0.1:0", "--attach", "0=" + strconv.Itoa(p.Process.Pid)}
	if supervised {
		args = append(args, "--supervise")
	}
	a := exec.Command(bin, args...)
	a.Env = append(os.Environ(), "HPCDAP_TOKEN=test-token")
	var stderr strings.Builder
	a.Stderr = &stderr
	aout, _ := a.StdoutPipe()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Process.Kill()
	l, err := bufio.NewReader(aout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(l), "listening on ")
	if err != nil || !ok {
		t.Fatalf("agent: %q, %v\n%s", l, err, stderr.String())
	}
	go io.Copy(io.Discard, aout)

	c, err := cdti.Dial(ctx, "tcp", addr, cdti.ClientOptions{ToolID: 1, Token: []byte("test-token"), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Attach(ctx, 0, cdti.RankInHeader, cdti.NewTag("test"), 50); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Control(ctx, 0, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
		SendSignal: uint32(syscall.SIGSTOP)}); err != nil {
		t.Fatal(err)
	}
	for stopped := false; !stopped; {
		select {
		case nt := <-c.Notifications():
			stopped = nt != nil && nt.Kind == cdti.NotifyTypeSignal && nt.Signal.Signal == uint32(syscall.SIGSTOP)
		case <-ctx.Done():
			t.Fatal("no SIGSTOP notification")
		}
	}
	rs, err := c.Update(ctx, 0, &cdti.SetBreakpoint{Addr: site, Instruction: 0xCC}, &cdti.ContinueProcess{})
	if err != nil || rs[0].Code != cdti.CmdSuccess || rs[1].Code != cdti.CmdSuccess {
		t.Fatalf("set the breakpoint and continue: %v, %v", rs, err)
	}
	if b := readMem(t, p.Process.Pid, site); b != 0xCC {
		t.Fatalf("byte at %#x after SetBreakpoint: %#x, want the trap 0xcc", site, b)
	}

	victim := a.Process.Pid
	if supervised {
		kids := children(a.Process.Pid)
		if len(kids) != 1 {
			t.Fatalf("supervisor pid %d has children %v, want its worker alone", a.Process.Pid, kids)
		}
		victim = kids[0]
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	werr := a.Wait()
	t.Logf("agent: %v\n%s", werr, stderr.String())
	if supervised {
		if b := readMem(t, p.Process.Pid, site); b != orig {
			t.Errorf("byte at %#x after the worker died: %#x, want the original %#x", site, b, orig)
		}
		if !strings.Contains(stderr.String(), "original bytes restored") {
			t.Errorf("the supervisor does not say it restored the trap:\n%s", stderr.String())
		}
	}
	in.Write([]byte{1})
	err = p.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return p.ProcessState.Sys().(syscall.WaitStatus)
}

// symbolAddr is the address of a function of a non-PIE executable (its ELF symbol table).
func symbolAddr(t *testing.T, path, name string) uint64 {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s.Value
		}
	}
	t.Fatalf("%s: no function %s", path, name)
	return 0
}

// readMem reads one byte of a process's memory (/proc/PID/mem).
func readMem(t *testing.T, pid int, addr uint64) byte {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		t.Fatalf("read pid %d at %#x: %v", pid, addr, err)
	}
	return b[0]
}

// children lists a process's children.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
