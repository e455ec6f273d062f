package adapter

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-dap"
)

// gdbThreadsScript prints, for every thread, what gdb learns through glibc's libthread_db: the
// LWP, the pthread_t ("info threads" shows the same handle) and the thread-local variables.
const gdbThreadsScript = `
import gdb
for th in sorted(gdb.selected_inferior().threads(), key=lambda t: t.num):
    th.switch()
    pt = int.from_bytes(th.handle(), 'little')
    vals = [str(gdb.parse_and_eval(e)) for e in ('tlsvar', 'tlsarr[1]', 'tlsscale')]
    addr = int(gdb.parse_and_eval('&tlsvar'))
    print('ORACLE %d %#x %#x %s' % (th.ptid[1], pt, addr, ' '.join(vals)))
`

// gdbTLSThread is gdb's view of one thread.
type gdbTLSThread struct {
	pthread, tlsAddr uint64
	values           []string // tlsvar, tlsarr[1], tlsscale
}

// gdbThreadsOracle attaches gdb to pid, runs gdbThreadsScript, and returns the threads by LWP.
func gdbThreadsOracle(t *testing.T, pid int) map[int]gdbTLSThread {
	t.Helper()
	needTool(t, "gdb")
	script := filepath.Join(t.TempDir(), "threads.py")
	if err := os.WriteFile(script, []byte(gdbThreadsScript), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("gdb", "-batch", "-nx", "-p", strconv.Itoa(pid), "-x", script).CombinedOutput()
	if err != nil {
		t.Fatalf("gdb -p %d: %v\n%s", pid, err, out)
	}
	threads := map[int]gdbTLSThread{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 7 || f[0] != "ORACLE" {
			continue
		}
		lwp, err1 := strconv.Atoi(f[1])
		pt, err2 := strconv.ParseUint(f[2], 0, 64)
		addr, err3 := strconv.ParseUint(f[3], 0, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("gdb oracle line %q", l)
		}
		threads[lwp] = gdbTLSThread{pthread: pt, tlsAddr: addr, values: f[4:]}
	}
	if len(threads) == 0 {
		t.Fatalf("gdb -p %d reported no thread:\n%s", pid, out)
	}
	return threads
}

var dapThreadName = regexp.MustCompile(`^rank 0 · (\w+) \(LWP (\d+)\) 0x([0-9a-f]+)$`)

// TestThreadNamesAndTLSAgainstGDB attaches to a program with eight workers, reads every
// thread's name and thread-local variables through DAP, detaches, and attaches gdb to the same,
// unchanged process: the pthread_t in each name and the values of __thread variables must be
// gdb's (which reads them with glibc's libthread_db).
func TestThreadNamesAndTLSAgainstGDB(t *testing.T) {
	t.Parallel()
	p := compileC(t, "tlsthreads", "-pthread")
	cmd := exec.Command(p.bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lc := collectLines(out)
	waitFor(t, "the workers to start", func() bool { return lc.count() > 0 })
	pid := cmd.Process.Pid

	d := newDAP(t, viaPipe)
	defer d.end()
	d.initialize()
	d.call("attach", map[string]any{"pid": pid}, nil)
	d.event("initialized")
	d.call("configurationDone", nil, nil)
	d.call("pause", map[string]any{"threadId": 1}, nil)
	if st := d.stopped(); st.Reason != "pause" {
		t.Fatalf("stopped %+v", st)
	}
	var threads dap.ThreadsResponseBody
	d.call("threads", nil, &threads)

	type dapView struct {
		role    string
		pthread uint64
		values  []string
		tlsAddr string
	}
	seen := map[int]dapView{}
	for _, th := range threads.Threads {
		m := dapThreadName.FindStringSubmatch(th.Name)
		if m == nil {
			t.Errorf("thread %d named %q, want %q", th.Id, th.Name, "rank 0 · ROLE (LWP N) 0xPTHREAD")
			continue
		}
		lwp, _ := strconv.Atoi(m[2])
		pt, _ := strconv.ParseUint(m[3], 16, 64)
		v := dapView{role: m[1], pthread: pt}
		// Evaluate in the program's own frame (park, or main's caller chain): the innermost
		// frames are in libc.
		frames := d.stackTrace(th.Id)
		fid := -1
		for _, f := range frames {
			if f.Name == "park" {
				fid = f.Id
				break
			}
		}
		if fid < 0 {
			t.Errorf("LWP %d: no park frame in %s", lwp, frameList(frames))
			continue
		}
		for _, e := range []string{"tlsvar", "tlsarr[1]", "tlsscale", "&tlsvar"} {
			var ev dap.EvaluateResponseBody
			d.call("evaluate", map[string]any{"expression": e, "frameId": fid, "context": "watch"}, &ev)
			if e == "&tlsvar" {
				v.tlsAddr = ev.Result
			} else {
				v.values = append(v.values, ev.Result)
			}
		}
		seen[lwp] = v
	}
	if len(threads.Threads) != 9 {
		t.Errorf("%d threads, the program has 9", len(threads.Threads))
	}

	// Detach; the threads stay parked, so gdb sees the same state.
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	waitFor(t, "the process to be untraced", func() bool { return procStatus(pid, "TracerPid") == "0" })
	oracle := gdbThreadsOracle(t, pid)
	if len(oracle) != len(seen) {
		t.Errorf("gdb lists %d threads, DAP %d", len(oracle), len(seen))
	}
	hexWord := regexp.MustCompile(`0x[0-9a-f]+`)
	for lwp, g := range oracle {
		v, ok := seen[lwp]
		if !ok {
			t.Errorf("gdb lists LWP %d, DAP does not", lwp)
			continue
		}
		t.Logf("LWP %d: DAP %s %#x %v %s; gdb %#x %v %#x", lwp, v.role, v.pthread, v.values, v.tlsAddr, g.pthread, g.values, g.tlsAddr)
		if v.pthread != g.pthread {
			t.Errorf("LWP %d: DAP names pthread_t %#x, gdb %#x", lwp, v.pthread, g.pthread)
		}
		for i, name := range []string{"tlsvar", "tlsarr[1]", "tlsscale"} {
			if v.values[i] != g.values[i] {
				t.Errorf("LWP %d: %s = %s, gdb %s", lwp, name, v.values[i], g.values[i])
			}
		}
		if a, err := strconv.ParseUint(hexWord.FindString(v.tlsAddr), 0, 64); err != nil || a != g.tlsAddr {
			t.Errorf("LWP %d: &tlsvar = %q, gdb %#x", lwp, v.tlsAddr, g.tlsAddr)
		}
		// The role is main for the leader, else the start routine: odd workers start in helper.
		want := "main"
		if lwp != pid {
			idx, err := strconv.Atoi(g.values[0])
			if err != nil {
				t.Fatalf("gdb tlsvar %q", g.values[0])
			}
			want = [2]string{"worker", "helper"}[(idx-1000)%2]
		}
		if v.role != want {
			t.Errorf("LWP %d: named %s, want %s", lwp, v.role, want)
		}
	}
}

// TestThreadNamesOfLaterThreads: the threads request at a stop after the first names the
// threads created since, by their start routines and pthread_t, while the main thread keeps
// its name (thread names are not read again for threads already named).
func TestThreadNamesOfLaterThreads(t *testing.T) {
	p := compileC(t, "tlsthreads", "-pthread")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "stopAtEntry": true})
	d.setBreakpoints(p.src, p.line(t, "all-ready"))
	d.call("configurationDone", nil, nil)
	d.stopped()
	var first dap.ThreadsResponseBody
	d.call("threads", nil, &first)
	if len(first.Threads) != 1 || dapThreadName.FindStringSubmatch(first.Threads[0].Name) == nil {
		t.Fatalf("threads at main: %+v, want the main thread named with its pthread_t", first.Threads)
	}
	d.call("continue", map[string]any{"threadId": first.Threads[0].Id}, nil)
	if st := d.stopped(); st.Reason != "breakpoint" {
		t.Fatalf("stopped %+v", st)
	}
	var later dap.ThreadsResponseBody
	d.call("threads", nil, &later)
	roles := map[string]int{}
	for _, th := range later.Threads {
		m := dapThreadName.FindStringSubmatch(th.Name)
		if m == nil {
			t.Errorf("thread %d named %q, want %q", th.Id, th.Name, "rank 0 · ROLE (LWP N) 0xPTHREAD")
			continue
		}
		roles[m[1]]++
		if th.Id == first.Threads[0].Id && th.Name != first.Threads[0].Name {
			t.Errorf("main thread renamed from %q to %q", first.Threads[0].Name, th.Name)
		}
	}
	if want := map[string]int{"main": 1, "worker": 4, "helper": 4}; !reflect.DeepEqual(roles, want) {
		t.Errorf("thread roles %v, want %v", roles, want)
	}
}

// TestThreadNamesOfRanksAgainstGDB: in a job of several ranks of one program, whose threads'
// names the front end labels rank after rank from what the first rank's labelling read (the
// thread library's data, read for the others with their lists in one collective), every
// rank's threads are named with their own pthread_t and start routine: after a detach, gdb
// attached to each rank lists the same LWPs with the same pthread_t. The ranks after the first
// take one CDTI message together (a job of the first rank alone measures what it takes).
func TestThreadNamesOfRanksAgainstGDB(t *testing.T) {
	threadNamesTakeOneMessage(t, false)
}

// TestThreadNamesOfRanksAgainstGDBWithASLR: the same with address-space randomisation on, as
// for ranks attached to a running job: every rank loads its libraries and maps its threads'
// stacks at addresses of its own, and the first rank's reads are replayed relative to each
// other rank's libraries (GetModuleMemory). Every rank's threads are named as gdb names them,
// and the ranks after the first still take one CDTI message together.
func TestThreadNamesOfRanksAgainstGDBWithASLR(t *testing.T) {
	if !randomised() {
		t.Skip("address-space randomisation is off on this machine")
	}
	threadNamesTakeOneMessage(t, true)
}

// threadNamesTakeOneMessage checks the thread names of 4 ranks against gdb's, and that they
// took one CDTI message more than those of one rank alone.
func threadNamesTakeOneMessage(t *testing.T, aslr bool) {
	const np = 4
	alone := threadNamesOfRanksAgainstGDB(t, 1, aslr, 8)
	sent := threadNamesOfRanksAgainstGDB(t, np, aslr, 8)
	t.Logf("first threads: %d CDTI messages sent for %d ranks, %d for one", sent, np, alone)
	if sent > alone+1 {
		t.Errorf("the first threads of %d ranks sent %d CDTI messages; one rank alone sent %d, so want at most %d (one collective for the ranks after the first)",
			np, sent, alone, alone+1)
	}
}

// TestThreadNamesOfManyThreadsAgainstGDB: ranks of 33 threads each, randomised, so that the
// thread library's data the first rank read (a descriptor a thread, in mappings of their own)
// is more than one command list carries: the ranks after the first read it with a few
// collectives, fewer messages than they are ranks, and every thread is named as gdb names it.
func TestThreadNamesOfManyThreadsAgainstGDB(t *testing.T) {
	const np, workers = 6, 32
	aslr := randomised()
	alone := threadNamesOfRanksAgainstGDB(t, 1, aslr, workers)
	sent := threadNamesOfRanksAgainstGDB(t, np, aslr, workers)
	t.Logf("first threads: %d CDTI messages sent for %d ranks of %d threads, %d for one", sent, np, workers+1, alone)
	if sent-alone >= np-1 {
		t.Errorf("the first threads of %d ranks sent %d CDTI messages, one rank alone %d: want fewer than one a rank after the first",
			np, sent, alone)
	}
}

// randomised reports whether the machine randomises address-space layouts.
func randomised() bool {
	b, err := os.ReadFile("/proc/sys/kernel/randomize_va_space")
	return err == nil && strings.TrimSpace(string(b)) != "0"
}

// threadNamesOfRanksAgainstGDB launches np ranks of tlsthreads of workers threads beside main
// (with address-space randomisation if aslr), stops each where its threads are parked, checks every rank's
// thread names against gdb's after a detach, and returns the CDTI messages the front end sent
// for the first threads request. With aslr, the ranks' libraries must lie at different
// addresses.
func threadNamesOfRanksAgainstGDB(t *testing.T, np int, aslr bool, workers int) uint64 {
	t.Helper()
	p := compileC(t, "tlsthreads", "-pthread", fmt.Sprintf("-DNWORKERS=%d", workers))
	d := newDAP(t, viaPipe)
	defer d.end()
	d.launch(map[string]any{"program": p.bin, "np": np, "stopMode": "rank", "disableASLR": !aslr})
	d.setBreakpoints(p.src, p.line(t, "all-ready"))
	d.call("configurationDone", nil, nil)
	waitFor(t, "every rank at the breakpoint", func() bool { return allRanksStopped(d, np) })
	ranks := d.ranks().Ranks
	if aslr && np > 1 {
		bases := map[string]bool{}
		for _, r := range ranks {
			bases[libcBase(t, r.Pid)] = true
		}
		if len(bases) < 2 {
			t.Fatalf("libc at %v in all %d ranks: the layouts are not randomised", bases, np)
		}
	}
	before := *d.ranks().Messages
	var threads dap.ThreadsResponseBody
	d.call("threads", nil, &threads)
	sent := d.ranks().Messages.Sent - before.Sent
	name := regexp.MustCompile(`^rank (\d+) · (\w+) \(LWP (\d+)\) 0x([0-9a-f]+)$`)
	type view struct {
		rank    int
		role    string
		pthread uint64
	}
	seen := map[int]view{} // by LWP
	for _, th := range threads.Threads {
		m := name.FindStringSubmatch(th.Name)
		if m == nil {
			t.Fatalf("thread %d named %q", th.Id, th.Name)
		}
		rank, _ := strconv.Atoi(m[1])
		lwp, _ := strconv.Atoi(m[3])
		pt, _ := strconv.ParseUint(m[4], 16, 64)
		seen[lwp] = view{rank, m[2], pt}
	}
	if len(threads.Threads) != np*(workers+1) {
		t.Fatalf("%d threads, the job has %d", len(threads.Threads), np*(workers+1))
	}
	// Detach; every rank goes on to park all its threads, which stay as they were named.
	d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
	for _, r := range ranks {
		waitFor(t, "the rank to be untraced", func() bool { return procStatus(r.Pid, "TracerPid") == "0" })
		oracle := gdbThreadsOracle(t, r.Pid)
		if len(oracle) != workers+1 {
			t.Errorf("rank %d: gdb lists %d threads, want %d", r.Rank, len(oracle), workers+1)
		}
		for lwp, g := range oracle {
			v, ok := seen[lwp]
			switch {
			case !ok:
				t.Errorf("rank %d: gdb lists LWP %d, DAP does not", r.Rank, lwp)
			case v.rank != r.Rank:
				t.Errorf("LWP %d: DAP names it a thread of rank %d, it is rank %d's", lwp, v.rank, r.Rank)
			case v.pthread != g.pthread:
				t.Errorf("rank %d: LWP %d: DAP names pthread_t %#x, gdb %#x", r.Rank, lwp, v.pthread, g.pthread)
			case (lwp == r.Pid) != (v.role == "main") || (v.role != "main" && v.role != "worker" && v.role != "helper"):
				t.Errorf("rank %d: LWP %d named %s", r.Rank, lwp, v.role)
			}
		}
	}
	return sent
}

// libcBase returns the address at which process pid maps libc first, from /proc/pid/maps.
func libcBase(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "/libc.so") || strings.Contains(l, "/libc-") {
			return strings.SplitN(l, "-", 2)[0]
		}
	}
	t.Fatalf("process %d maps no libc:\n%s", pid, b)
	return ""
}
