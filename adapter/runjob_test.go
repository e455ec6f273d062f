package adapter

import (
	"bytes"
	"debug/elf"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
)

// runjobProgram is what the runjob tests share: testdata/bgq.c built as a static big-endian
// Power program, the emulator checked, a private root for the emulated system's I/O nodes
// (removed at the end), and the CNKs told to interrupt with SIGUSR1, which bgq.c handles
// (QEMU ≥ 9 ignores a debugger's interrupt).
func runjobProgram(t testing.TB) (p *program, emulator, root string) {
	t.Helper()
	t.Setenv("HPCDAP_AGENT_INTERRUPT_SIGNAL", "SIGUSR1")
	tg := powerTargets[0]
	emulator = modernQEMU(t, tg.emulator)
	p = compilePowerC(t, tg, "bgq")
	root, err := os.MkdirTemp("", "bgq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	return p, emulator, root
}

// TestRunjobSession launches 8 ranks through `"launcher": "runjob"` on the emulated Blue
// Gene/Q (no runjob on PATH: the one beside hpcdap, said in the console), 2 ranks per compute
// node, 2 compute nodes per I/O node: runjob starts hpcdap's agent on each of the 2 I/O nodes
// as its tool, the agents reach the compute nodes' CNKs through toolctld, and the session
// stops every rank at a breakpoint with the stack gdb-multiarch sees, releases each rank's
// loop and runs the job to its end with gdb's exit codes.
func TestRunjobSession(t *testing.T) {
	const np = 8
	p, emulator, root := runjobProgram(t)
	oracle := map[int]bgqOracle{}
	for _, r := range []int{0, 5} {
		oracle[r] = bgqRankOracle(t, p, emulator, r, np)
	}

	d := newDAP(t, viaPipe)
	defer d.close()
	// The ranks wait for each other once each handles the interrupt signal (bgq.c), so that no
	// rank is interrupted before.
	d.launch(map[string]any{"program": p.bin, "launcher": "runjob", "np": np, "env": map[string]any{"READY_DIR": t.TempDir()},
		"launcherArgs": []string{"--ranks-per-node", "2", "--cn-per-ion", "2", "--root", root}})
	bps := d.setBreakpoints(p.src, p.line(t, "leaf"))
	if len(bps) != 1 || !bps[0].Verified {
		t.Fatalf("breakpoint %+v", bps)
	}
	d.call("configurationDone", nil, nil)
	releaseAtLeaf(t, d, np, func(r RankState, frames []dap.StackFrame) {
		if o, ok := oracle[r.Rank]; ok {
			for i, w := range o.dump.Frames {
				if i >= len(frames) || frames[i].Name != w.Name || frames[i].Line != w.Line {
					t.Errorf("rank %d frame %d: %v; gdb %s line %d", r.Rank, i, frameNames(frames), w.Name, w.Line)
				}
			}
		}
	})
	if _, err := d.c.WaitEvent("terminated", 2*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if o := allOutput(d); !strings.Contains(o, "emulated BG/Q") {
		t.Errorf("the console does not say which runjob ran:\n%s", o)
	}
	for r, o := range oracle {
		if bgqExit(r) != o.exit {
			t.Fatalf("rank %d: the test computes exit code %d, gdb's run ended with %d", r, bgqExit(r), o.exit)
		}
	}
	checkExits(t, d, bgqExit)
}

// TestRunjobBreakpointRemoved: behind a BG/Q CNK, whose memory shows a planted trap and which
// keeps no copy of what it replaced, a breakpoint is taken out with the instruction the front
// end read before planting it: at the first stop the breakpoint is cleared, and the memory
// under it then holds the program's own instruction again (readMemory against the ELF file)
// on every rank; every rank then runs to its end with its exit code, none stopping again.
func TestRunjobBreakpointRemoved(t *testing.T) {
	const np = 4
	p, _, root := runjobProgram(t)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "launcher": "runjob", "np": np, "env": map[string]any{"READY_DIR": t.TempDir()},
		"launcherArgs": []string{"--ranks-per-node", "1", "--cn-per-ion", "2", "--root", root}})
	if bps := d.setBreakpoints(p.src, p.line(t, "leaf")); len(bps) != 1 || !bps[0].Verified {
		t.Fatalf("breakpoint %+v", bps)
	}
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	if st.Reason != "breakpoint" {
		t.Fatalf("first stop: %+v", st)
	}
	var at uint64
	for _, r := range d.ranks().Ranks {
		frames := d.stackTrace(r.ThreadID)
		if r.StopReason == "breakpoint" {
			at, _ = strconv.ParseUint(frames[0].InstructionPointerReference, 0, 64)
		}
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": "release = 1", "frameId": frames[0].Id, "context": "repl"}, &ev)
	}
	f, err := elf.Open(p.bin)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4)
	for _, sec := range f.Sections {
		if sec.Type == elf.SHT_PROGBITS && at >= sec.Addr && at+4 <= sec.Addr+sec.Size {
			sec.ReadAt(want, int64(at-sec.Addr))
		}
	}
	f.Close()
	readAt := func(when string) {
		for _, r := range d.ranks().Ranks {
			d.call("hpcdap/focus", map[string]any{"ranks": strconv.Itoa(r.Rank)}, nil)
			var rm dap.ReadMemoryResponseBody
			d.call("readMemory", map[string]any{"memoryReference": fmt.Sprintf("%#x", at), "count": 8}, &rm)
			if got, _ := base64.StdEncoding.DecodeString(rm.Data); len(got) != 8 || !bytes.Equal(got[:4], want) {
				t.Errorf("rank %d: at %#x %s: % x, the program's % x", r.Rank, at, when, got, want)
			}
		}
	}
	// The user reads the program, not the trap the CNK shows there.
	readAt("while the breakpoint is planted")
	d.setBreakpoints(p.src)
	readAt("after the breakpoint was cleared")
	d.call("hpcdap/focus", map[string]any{"ranks": ""}, nil) // the continue is the whole job's
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	end, err := d.c.WaitAny([]string{"stopped", "terminated"}, 2*time.Minute, focusStop)
	if err != nil {
		t.Fatal(err)
	}
	if end.Event != "terminated" {
		t.Fatalf("after the breakpoint was removed: %s %s", end.Event, end.Body)
	}
	checkExits(t, d, bgqExit)
}

// bgqExit is what bgq.c's rank exits with: middle(rank, 10·rank+1) mod 7 (gdb's runs agree:
// TestRunjobSession).
func bgqExit(rank int) int {
	x := int64(10*rank + 2)
	return int((3*x + int64(rank) + int64(1.5*float64(x+int64(rank))) + 2) % 7)
}

// TestRunjobAttach attaches by pid to a runjob of the emulated BG/Q started outside the
// debugger, whose 4 ranks spin: runjob notices MPIR_being_debugged within its poll and starts
// the agents on the I/O nodes; every rank stops where it spins, its stack under main; each is
// let out of its loop, and a disconnect that does not terminate leaves the job to end by
// itself with every rank's output and runjob's normal exit (the agents gave the ranks back).
func TestRunjobAttach(t *testing.T) {
	const np = 4
	p, _, root := runjobProgram(t)
	rj := startRunjob(t, p, root, np, 1)
	d, rs := attachAtEntry(t, rj.pid, np)
	spin := p.line(t, "spin")
	for _, r := range rs {
		frames := d.stackTrace(r.ThreadID)
		if len(frames) == 0 || frames[0].Name != "main" || frames[0].Line < spin || frames[0].Line > spin+1 {
			t.Errorf("rank %d: %v, want main at line %d", r.Rank, frameNames(frames), spin)
			continue
		}
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": "release = 1", "frameId": frames[0].Id, "context": "repl"}, &ev)
	}
	d.c.Request("disconnect", map[string]any{"terminateDebuggee": false})
	d.end()
	rj.waitEnd(t, np)
}

// BenchmarkRunjobToBreakpoint: launch → every one of 8 ranks stopped at a breakpoint (stop
// mode rank), through runjob on the emulated Blue Gene/Q (2 ranks per compute node, 2 compute
// nodes per I/O node: CIOS agents relaying to toolctld, CNKs answering v6 only), beside the
// same program launched with "emulator" (one agent of the RSP back end per rank set, with
// every extension).
//
//	go test -run '^$' -bench RunjobToBreakpoint -benchtime 5x ./adapter
func BenchmarkRunjobToBreakpoint(b *testing.B) {
	p, _, root := runjobProgram(b)
	const np = 8
	line := p.line(b, "leaf")
	run := func(args map[string]any) time.Duration {
		d := newDAP(b, viaPipe)
		defer d.close()
		t0 := time.Now()
		d.launch(args)
		d.setBreakpoints(p.src, line)
		d.call("configurationDone", nil, nil)
		for range np {
			if _, err := d.c.WaitEvent("stopped", time.Minute, nil); err != nil {
				b.Fatal(err)
			}
		}
		el := time.Since(t0)
		d.call("terminate", nil, nil)
		d.c.WaitEvent("terminated", time.Minute, nil)
		return el
	}
	var bgq, plain time.Duration
	for range b.N {
		bgq += run(map[string]any{"program": p.bin, "launcher": "runjob", "np": np, "stopMode": "rank",
			"launcherArgs": []string{"--ranks-per-node", "2", "--cn-per-ion", "2", "--root", root}})
		plain += run(map[string]any{"program": p.bin, "emulator": powerTargets[0].emulator, "np": np, "stopMode": "rank"})
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(bgq.Seconds()/n, "runjob-s")
	b.ReportMetric(plain.Seconds()/n, "rsp-agent-s")
}

// TestRunjobSubset launches 8 ranks through runjob with "ranks": "5-6": runjob is given the
// subset (MPIR_subset_attach) and starts the agent only on the I/O node that serves those
// ranks (ranks 4–7, 2 per compute node), and the session attaches rank 5 alone on its compute
// node and rank 6 alone on its own, so that it holds those two ranks and no other: the
// breakpoint stops ranks 5 and 6, while ranks 4 and 7, out of the session, run on to their
// loop.
func TestRunjobSubset(t *testing.T) {
	p, _, root := runjobProgram(t)
	d := newDAP(t, viaPipe)
	defer d.close()
	ready := t.TempDir()
	d.launch(map[string]any{"program": p.bin, "launcher": "runjob", "np": 8, "ranks": "5-6",
		"env":          map[string]any{"READY_DIR": ready},
		"launcherArgs": []string{"--ranks-per-node", "2", "--cn-per-ion", "2", "--root", root}})
	var ranks []int
	for _, r := range d.ranks().Ranks {
		ranks = append(ranks, r.Rank)
	}
	if fmt.Sprint(ranks) != "[5 6]" {
		t.Fatalf("the session's ranks %v, want the subset's, [5 6]", ranks)
	}
	d.setBreakpoints(p.src, p.line(t, "leaf"))
	d.call("configurationDone", nil, nil)
	hit := map[int]bool{}
	for stops := 0; len(hit) < 2; stops++ {
		st := d.stopped()
		for _, r := range d.ranks().Ranks {
			if r.StopReason == "breakpoint" {
				hit[r.Rank] = true
			}
		}
		if stops > 4 {
			break
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	if len(hit) != 2 || !hit[5] || !hit[6] {
		t.Errorf("ranks stopped at the breakpoint: %v, want 5 and 6", hit)
	}
	for _, r := range []int{4, 7} {
		// While 5 and 6 are stopped for the session, the ranks outside it reach their loop.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ready, fmt.Sprintf("spin-%d", r))); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d, outside the session, did not run to its loop", r)
			}
		}
	}
	d.call("terminate", nil, nil)
	if _, err := d.c.WaitEvent("terminated", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
}

// TestRunjobTree launches 4 ranks through runjob on the emulated BG/Q, one compute node per
// I/O node, so that runjob starts 4 agents, each the job's own (owned: it ends with its
// front end's connections), and puts them in a tree at fan-out 2 (0 → 1, 2; 1 → 3): the
// front end reaches the CNKs of every I/O node through the root's relays, stops every rank
// at a breakpoint, releases each, runs the job to its end with every rank's exit code, and
// ends the owned tree (the root, then the agents below it). An I/O node's agent relays its
// ranks' frames to toolctld, and those of the agents below it to them.
func TestRunjobTree(t *testing.T) {
	const np = 4
	p, _, root := runjobProgram(t)
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "launcher": "runjob", "np": np, "fanout": 2, "env": map[string]any{"READY_DIR": t.TempDir()},
		"launcherArgs": []string{"--ranks-per-node", "1", "--cn-per-ion", "1", "--root", root}})
	if bps := d.setBreakpoints(p.src, p.line(t, "leaf")); len(bps) != 1 || !bps[0].Verified {
		t.Fatalf("breakpoint %+v", bps)
	}
	d.call("configurationDone", nil, nil)
	releaseAtLeaf(t, d, np, nil)
	if _, err := d.c.WaitEvent("terminated", 2*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	checkExits(t, d, bgqExit)
}

// releaseAtLeaf continues the job until each of its np ranks has stopped at the breakpoint
// in bgq.c's leaf, checking each rank's stack there with check (if not nil) and releasing it
// from its loop (release = 1), and continues it once more.
func releaseAtLeaf(t *testing.T, d *dapSession, np int, check func(r RankState, frames []dap.StackFrame)) {
	t.Helper()
	hit := map[int]bool{}
	for stops := 0; len(hit) < np; stops++ {
		st := d.stopped()
		if st.Reason != "breakpoint" {
			t.Fatalf("stop %d: %+v", stops, st)
		}
		for _, r := range d.ranks().Ranks {
			if r.StopReason != "breakpoint" || hit[r.Rank] {
				continue
			}
			hit[r.Rank] = true
			frames := d.stackTrace(r.ThreadID)
			if check != nil {
				check(r, frames)
			}
			var ev dap.EvaluateResponseBody
			d.call("evaluate", map[string]any{"expression": "release = 1", "frameId": frames[0].Id, "context": "repl"}, &ev)
		}
		if stops > 2*np {
			t.Fatalf("%d stops, ranks at the breakpoint: %v", stops, hit)
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
}
