package mpir

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// gdbScript stops mpirun at MPIR_Breakpoint (the recipe that works without debug info), prints
// the pid, the state, the addresses and every table entry read with casts, then waits on a FIFO
// until the test has read the same memory, and detaches so that the job completes.
const gdbScript = `set pagination off
set confirm off
set breakpoint pending on
catch load libopen-rte
run
set var *(int*)&MPIR_being_debugged = 1
delete
break MPIR_Breakpoint
continue
python
import gdb
print("PID\t%d" % gdb.selected_inferior().pid)
n = int(gdb.parse_and_eval("*(int*)&MPIR_proctable_size"))
st = int(gdb.parse_and_eval("*(int*)&MPIR_debug_state"))
print("STATE\t%d\t%d" % (st, n))
print("ADDR\t%d\t%d" % (int(gdb.parse_and_eval("(long)&MPIR_Breakpoint")), int(gdb.parse_and_eval("(long)&MPIR_proctable"))))
p = int(gdb.parse_and_eval("*(long*)&MPIR_proctable"))
for i in range(n):
    e = p + 24*i
    h = gdb.parse_and_eval("*(char**)%d" % e).string()
    x = gdb.parse_and_eval("*(char**)%d" % (e+8)).string()
    pid = int(gdb.parse_and_eval("*(int*)%d" % (e+16)))
    print("ENTRY\t%d\t%d\t%s\t%s" % (i, pid, h, x))
print("READY")
end
shell read line < FIFO
delete
detach
quit
`

// The table and the symbol addresses read through Objects, Resolve and ReadTable from a real
// mpirun stopped at MPIR_Breakpoint equal what gdb prints; the loaded objects agree with
// /proc/PID/maps.
func TestProctableMatchesGDB(t *testing.T) {
	need(t, ompiProg)
	testenv.NeedTool(t, "gdb", "gdb")
	mpirun := testenv.NeedTool(t, "mpirun.openmpi", "openmpi-bin")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script.gdb")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(gdbScript, "FIFO", fifo)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("gdb", "-nx", "-batch", "-x", script, "--args", mpirun, "-np", "4", ompiProg)
	cmd.Env = ompiEnv()
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				f.WriteString("go\n")
				f.Close()
			}
		}
	}
	t.Cleanup(func() {
		release()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})

	type entry struct {
		pid       int
		host, exe string
	}
	var (
		pid, state, size int
		bpAddr, tabAddr  uint64
		entries          []entry
		transcript       []string
	)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(90 * time.Second)
read:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("gdb ended before READY:\n%s", strings.Join(transcript, "\n"))
			}
			transcript = append(transcript, l)
			f := strings.Split(l, "\t")
			switch f[0] {
			case "PID":
				pid, _ = strconv.Atoi(f[1])
			case "STATE":
				state, _ = strconv.Atoi(f[1])
				size, _ = strconv.Atoi(f[2])
			case "ADDR":
				bpAddr, _ = strconv.ParseUint(f[1], 10, 64)
				tabAddr, _ = strconv.ParseUint(f[2], 10, 64)
			case "ENTRY":
				p, _ := strconv.Atoi(f[2])
				entries = append(entries, entry{pid: p, host: f[3], exe: f[4]})
			case "READY":
				break read
			}
		case <-timeout:
			t.Fatalf("gdb did not reach MPIR_Breakpoint in 90 s:\n%s", strings.Join(transcript, "\n"))
		}
	}
	if state != DebugSpawned || size != 4 || len(entries) != 4 || pid == 0 {
		t.Fatalf("gdb saw state %d size %d, %d entries, pid %d; want SPAWNED with 4", state, size, len(entries), pid)
	}

	ctx := context.Background()
	mem := openProcMem(t, pid)
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	objs, err := Objects(ctx, mem, lp64, procAuxv(t, pid), exe)
	if err != nil {
		t.Fatalf("Objects: %v", err)
	}
	checkObjectsAgainstMaps(t, pid, objs)
	syms, err := Resolve(objs)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if !strings.Contains(filepath.Base(syms.File.Path), "libopen-rte") {
		t.Errorf("symbols from %s, want libopen-rte", syms.File.Path)
	}
	if syms.Breakpoint != bpAddr || syms.Proctable != tabAddr {
		t.Errorf("MPIR_Breakpoint %#x, MPIR_proctable %#x; gdb says %#x, %#x", syms.Breakpoint, syms.Proctable, bpAddr, tabAddr)
	}
	procs, err := ReadTable(ctx, mem, lp64, syms.Proctable, syms.ProctableSize)
	if err != nil {
		t.Fatalf("ReadTable: %v", err)
	}
	if len(procs) != len(entries) {
		t.Fatalf("%d entries, gdb printed %d", len(procs), len(entries))
	}
	for i, p := range procs {
		e := entries[i]
		if p.Rank != i || p.Pid != e.pid || p.Host != e.host || p.Executable != e.exe {
			t.Errorf("entry %d = %+v, gdb printed %+v", i, p, e)
		}
	}
	// The ranks the table names are this job's: their environment carries the same rank.
	for _, p := range procs {
		if r, ok := testenv.ProcEnv(p.Pid, "OMPI_COMM_WORLD_RANK"); !ok || r != strconv.Itoa(p.Rank) {
			t.Errorf("pid %d: OMPI_COMM_WORLD_RANK %q (found %v), want %d", p.Pid, r, ok, p.Rank)
		}
	}
}

// checkObjectsAgainstMaps checks every object with a file against /proc/PID/maps: the file is
// mapped, and its mapping of file offset 0 starts at the load bias (true for PIE executables
// and shared objects, whose first PT_LOAD is at address 0).
func checkObjectsAgainstMaps(t *testing.T, pid int, objs []Object) {
	t.Helper()
	starts, err := testenv.ProcMapStarts(pid)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, o := range objs {
		if !strings.HasPrefix(o.Path, "/") {
			continue // linux-vdso.so.1
		}
		files++
		real, err := filepath.EvalSymlinks(o.Path)
		if err != nil {
			t.Errorf("object %s: %v", o.Path, err)
			continue
		}
		start, ok := starts[real]
		if !ok {
			start, ok = starts[o.Path]
		}
		if !ok {
			t.Errorf("object %s (%s) is not in /proc/%d/maps", o.Path, real, pid)
			continue
		}
		if start != o.Bias {
			t.Errorf("object %s: bias %#x, maps says offset 0 is mapped at %#x", o.Path, o.Bias, start)
		}
	}
	if files < 5 {
		t.Errorf("only %d objects with a file: %+v", files, objs)
	}
}
