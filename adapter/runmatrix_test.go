package adapter

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// The run-control matrix: every stop mode with 1, 2, 4 and 16 ranks, each driven through
// stepping (next, stepIn, stepOut, instruction steps, a rank exiting during a step, continue
// to the end), pause and continue, breakpoints hit while other ranks run, and a breakpoint
// removed while several threads' hits of it wait. gdb, one run per rank, says where each rank
// must stand. Run it repeatedly (go test -count) and under load to find races.

var matrixRanks = []int{1, 2, 4, 16}

var matrixModes = []string{"all", "rank", "thread"}

// matrixScript is the stepping script of the matrix, from main's first line: into square and
// out, instruction steps, and on to the line where the last rank exits.
var matrixScript = []string{"next", "next", "next", "next", "next", "step", "next", "finish", "next", "stepi",
	"nexti", "next", "next", "next"}

func TestRunControlMatrix(t *testing.T) {
	t.Parallel()
	p := compileC(t, "runctl")
	o := &matrixOracle{p: p}
	for _, np := range matrixRanks {
		for _, mode := range matrixModes {
			t.Run(fmt.Sprintf("np%d-%s", np, mode), func(t *testing.T) {
				t.Run("steps", func(t *testing.T) { matrixSteps(t, o, np, mode) })
				t.Run("pause", func(t *testing.T) { matrixPause(t, p, np, mode) })
				t.Run("breakpoints", func(t *testing.T) { matrixBreakpoints(t, o, np, mode) })
				t.Run("removed", func(t *testing.T) { matrixRemoved(t, p, np, mode) })
			})
		}
	}
}

// matrixOracle runs gdb once per rank and scenario and keeps what it recorded.
type matrixOracle struct {
	p     *program
	mu    sync.Mutex
	steps map[[2]int][]oracleDump // (rank, last) → states through the script
	hits  map[[2]int][]oracleDump // (rank, last) → states at each breakpoint hit
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stepStates is gdb's state of rank (of np) at main and after each step of the script; a
// state without frames means the process has exited.
func (o *matrixOracle) stepStates(t *testing.T, rank, np int) []oracleDump {
	t.Helper()
	key := [2]int{rank, boolInt(rank == np-1)}
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := o.steps[key]; ok {
		return s
	}
	cmds := []string{"break main", "run", "oracle-dump"}
	for _, s := range matrixScript {
		cmds = append(cmds, s, "oracle-dump")
	}
	cmds = append(cmds, "kill")
	s := gdbOracle(t, o.p, rankEnv(rank, np), []string{"steps"}, cmds...)
	if len(s) != len(matrixScript)+1 {
		t.Fatalf("gdb recorded %d states for %d steps", len(s), len(matrixScript))
	}
	if o.steps == nil {
		o.steps = map[[2]int][]oracleDump{}
	}
	o.steps[key] = s
	return s
}

// hitStates is gdb's state of rank at each hit of a breakpoint on square's first line.
func (o *matrixOracle) hitStates(t *testing.T, rank, np int) []oracleDump {
	t.Helper()
	key := [2]int{rank, boolInt(rank == np-1)}
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := o.hits[key]; ok {
		return s
	}
	s := gdbOracle(t, o.p, rankEnv(rank, np), []string{"steps"}, fmt.Sprintf("break runctl.c:%d",
		o.p.line(t, "square-body")), "run", "oracle-dump", "continue", "oracle-dump", "continue", "oracle-dump")
	var hits []oracleDump
	for _, d := range s {
		if len(d.Frames) > 0 {
			hits = append(hits, d)
		}
	}
	if o.hits == nil {
		o.hits = map[[2]int][]oracleDump{}
	}
	o.hits[key] = hits
	return hits
}

func rankEnv(rank, np int) []string {
	return []string{fmt.Sprintf("HPCDAP_RANK=%d", rank), fmt.Sprintf("HPCDAP_NP=%d", np)}
}

// matrixLaunch starts the program with np ranks in a stop mode.
func matrixLaunch(t *testing.T, p *program, np int, mode, what string, extra map[string]any) *dapSession {
	t.Helper()
	d := newDAP(t, viaPipe)
	t.Cleanup(d.close)
	args := map[string]any{"program": p.bin, "args": []string{what}, "np": np, "stopMode": mode}
	for k, v := range extra {
		args[k] = v
	}
	d.launch(args)
	return d
}

// rankThreads maps each rank to the DAP id of its main thread.
func rankThreads(d *dapSession) map[int]int {
	ids := map[int]int{}
	for _, r := range d.ranks().Ranks {
		ids[r.Rank] = r.ThreadID
	}
	return ids
}

// waitRanks polls hpcdap/ranks until cond holds for every rank, or fails after a minute
// naming the ranks for which it does not.
func waitRanks(t *testing.T, d *dapSession, what string, cond func(RankState) bool) []RankState {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rs := d.ranks().Ranks
		var bad []string
		for _, r := range rs {
			if !cond(r) {
				bad = append(bad, fmt.Sprintf("%d %s", r.Rank, r.State))
			}
		}
		if len(bad) == 0 {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so within a minute: ranks %s", what, strings.Join(bad, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stoppedEvent waits for the next stopped event.
func stoppedEvent(t *testing.T, d *dapSession) dap.StoppedEventBody {
	t.Helper()
	return d.stopped()
}

// sendAll sends one request per thread at once and fails unless every one succeeds.
func sendAll(t *testing.T, d *dapSession, command string, tids []int, extra map[string]any) {
	t.Helper()
	var chans []<-chan *dapclient.Message
	for _, tid := range tids {
		args := map[string]any{"threadId": tid}
		for k, v := range extra {
			args[k] = v
		}
		_, ch, err := d.c.Send(command, args)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	for i, ch := range chans {
		select {
		case m := <-ch:
			if m == nil || !m.Success {
				msg := "connection closed"
				if m != nil {
					msg = m.Message
				}
				t.Fatalf("%s thread %d: %s", command, tids[i], msg)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s thread %d: no response", command, tids[i])
		}
	}
}

// stepArgs is the DAP request and arguments of a gdb stepping command.
func stepArgs(cmd string) (string, map[string]any) {
	switch cmd {
	case "next":
		return "next", nil
	case "step":
		return "stepIn", nil
	case "finish":
		return "stepOut", nil
	case "stepi":
		return "stepIn", map[string]any{"granularity": "instruction"}
	case "nexti":
		return "next", map[string]any{"granularity": "instruction"}
	}
	panic("no DAP step for " + cmd)
}

// checkExits compares each rank's exit code once the job has ended (its terminated event has
// been seen).
func checkExits(t *testing.T, d *dapSession, code func(rank int) int) {
	t.Helper()
	for _, r := range d.ranks().Ranks {
		if r.State != "exited" || r.ExitCode == nil || *r.ExitCode != code(r.Rank) {
			t.Errorf("rank %d: %s, exit code %v, want %d", r.Rank, r.State, fmtCode(r.ExitCode), code(r.Rank))
		}
	}
}

func fmtCode(c *int) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprint(*c)
}

// stepsExitCode is the exit code of a rank of the "steps" run.
func stepsExitCode(np int) func(int) int {
	return func(rank int) int {
		if rank == np-1 {
			return 40 + rank%8
		}
		return rank % 8
	}
}

func matrixSteps(t *testing.T, o *matrixOracle, np int, mode string) {
	oracle := make([][]oracleDump, np)
	for r := range np {
		oracle[r] = o.stepStates(t, r, np)
	}
	d := matrixLaunch(t, o.p, np, mode, "steps", map[string]any{"stopAtEntry": true})
	d.call("configurationDone", nil, nil)
	if mode == "all" {
		if st := stoppedEvent(t, d); st.Reason != "entry" || !st.AllThreadsStopped {
			t.Fatalf("stopped %+v, want entry of all", st)
		}
	} else {
		for range np {
			if st := stoppedEvent(t, d); st.Reason != "entry" {
				t.Fatalf("stopped %+v, want entry", st)
			}
		}
	}
	waitRanks(t, d, "every rank stopped at entry", func(r RankState) bool { return r.State == "stopped" })
	ids := rankThreads(d)
	for r := range np {
		compareTop(t, fmt.Sprintf("rank %d at entry", r), d.stackTrace(ids[r]), oracle[r][0])
	}
	live := map[int]bool{}
	for r := range np {
		live[r] = true
	}
	for i, cmd := range matrixScript {
		var exiting, stepping []int
		var tids []int
		for r := range np {
			if !live[r] {
				continue
			}
			if len(oracle[r][i+1].Frames) == 0 {
				exiting = append(exiting, r)
			} else {
				stepping = append(stepping, r)
			}
			tids = append(tids, ids[r])
		}
		command, extra := stepArgs(cmd)
		if mode == "all" {
			tids = tids[:1] // one request steps the whole focus
		}
		sendAll(t, d, command, tids, extra)
		what := fmt.Sprintf("step %d (%s)", i, cmd)
		// One stopped event for the job (all), or one per rank that did not exit.
		events := len(stepping)
		if mode == "all" && events > 0 {
			events = 1
		}
		for range events {
			st := stoppedEvent(t, d)
			if st.Reason != "step" {
				t.Fatalf("%s: stopped %+v, want a step", what, st)
			}
		}
		for _, r := range exiting {
			live[r] = false
		}
		if len(stepping) == 0 {
			break
		}
		waitRanks(t, d, what, func(rs RankState) bool {
			if live[rs.Rank] {
				return rs.State == "stopped"
			}
			return rs.State == "exited"
		})
		for _, r := range stepping {
			if !compareTop(t, fmt.Sprintf("rank %d after %s", r, what), d.stackTrace(ids[r]), oracle[r][i+1]) {
				return
			}
		}
	}
	var rest []int
	for r := range np {
		if live[r] {
			rest = append(rest, ids[r])
		}
	}
	if len(rest) > 0 {
		if mode == "all" {
			rest = rest[:1]
		}
		sendAll(t, d, "continue", rest, nil)
	}
	d.event("terminated")
	checkExits(t, d, stepsExitCode(np))
}

func matrixPause(t *testing.T, p *program, np int, mode string) {
	ready := t.TempDir()
	d := matrixLaunch(t, p, np, mode, "spin", map[string]any{"env": map[string]any{"READY_DIR": ready}})
	d.call("configurationDone", nil, nil)
	waitReady(t, ready, np)
	ids := rankThreads(d)
	for round := range 2 {
		what := fmt.Sprintf("pause %d", round)
		d.call("pause", map[string]any{"threadId": ids[0]}, nil)
		st := stoppedEvent(t, d)
		if st.Reason != "pause" || (mode == "all") != st.AllThreadsStopped {
			t.Fatalf("%s: stopped %+v", what, st)
		}
		rs := d.ranks().Ranks
		for _, r := range rs {
			want := "running"
			if mode == "all" || r.Rank == 0 {
				want = "stopped"
			}
			if r.State != want {
				t.Errorf("%s: rank %d is %s, want %s", what, r.Rank, r.State, want)
			}
		}
		paused := []int{0}
		if mode == "all" {
			paused = paused[:0]
			for r := range np {
				paused = append(paused, r)
			}
		}
		for _, r := range paused {
			frames := d.stackTrace(ids[r])
			if !hasCallChain(frames, "spin", "main") {
				t.Errorf("%s: rank %d's stack %s does not show spin called by main", what, r, strings.Join(frameNames(frames), " ← "))
			}
		}
		d.call("continue", map[string]any{"threadId": ids[0]}, nil)
		waitRanks(t, d, what+": every rank running again", func(r RankState) bool { return r.State == "running" })
	}
	var pids []int
	for _, r := range d.ranks().Ranks {
		pids = append(pids, r.Pid)
	}
	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	for _, pid := range pids {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if st := procStatus(pid, "State"); st == "" || strings.HasPrefix(st, "Z") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank process %d still runs 30 s after the disconnect", pid)
			}
		}
	}
}

// waitReady waits until every rank of the spin run has created its file in dir (it is in its
// loop), or fails after a minute naming the ranks that have not.
func waitReady(t *testing.T, dir string, np int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var missing []string
		for r := range np {
			if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(r))); err != nil {
				missing = append(missing, strconv.Itoa(r))
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ranks %s did not reach their loop within a minute", strings.Join(missing, ", "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hasCallChain reports whether frames (innermost first) show inner called by outer.
func hasCallChain(frames []dap.StackFrame, inner, outer string) bool {
	for i, f := range frames {
		if f.Name == inner {
			return i+1 < len(frames) && frames[i+1].Name == outer
		}
	}
	return false
}

func matrixBreakpoints(t *testing.T, o *matrixOracle, np int, mode string) {
	oracle := make([][]oracleDump, np)
	for r := range np {
		oracle[r] = o.hitStates(t, r, np)
	}
	d := matrixLaunch(t, o.p, np, mode, "steps", nil)
	d.setBreakpoints(o.p.src, o.p.line(t, "square-body"))
	d.call("configurationDone", nil, nil)
	hits := make([]int, np)
	ids := map[int]int{}
	check := func(rank int, what string) {
		if hits[rank] >= len(oracle[rank]) {
			t.Fatalf("%s: rank %d hit the breakpoint %d times, gdb %d", what, rank, hits[rank]+1, len(oracle[rank]))
		}
		want := oracle[rank][hits[rank]]
		frames := d.stackTrace(ids[rank])
		compareTop(t, fmt.Sprintf("rank %d, hit %d", rank, hits[rank]), frames, want)
		if len(frames) > 1 && len(want.Frames) > 1 && frames[1].Line != want.Frames[1].Line {
			t.Errorf("rank %d, hit %d: called from line %d, gdb %d", rank, hits[rank], frames[1].Line, want.Frames[1].Line)
		}
		hits[rank]++
	}
	for stops := 0; ; stops++ {
		m, err := d.c.WaitAny([]string{"stopped", "terminated"}, time.Minute, focusStop)
		if err != nil {
			t.Fatalf("after %d stops: %v (hits %v)", stops, err, hits)
		}
		if m.Event == "terminated" {
			break
		}
		var st dap.StoppedEventBody
		if err := m.Decode(&st); err != nil {
			t.Fatal(err)
		}
		if st.Reason != "breakpoint" {
			t.Fatalf("stop %d: %+v, want a breakpoint", stops, st)
		}
		if len(ids) == 0 {
			ids = rankThreads(d)
		}
		what := fmt.Sprintf("stop %d", stops)
		if mode == "all" {
			// Every rank at the breakpoint stopped for it; the others were stopped wherever
			// they ran.
			for _, r := range d.ranks().Ranks {
				if r.State == "stopped" && r.StopReason == "breakpoint" {
					check(r.Rank, what)
				}
			}
		} else {
			rank := -1
			for r, id := range ids {
				if id == st.ThreadId {
					rank = r
				}
			}
			if rank < 0 {
				t.Fatalf("%s: thread %d is no rank's main thread", what, st.ThreadId)
			}
			check(rank, what)
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	for r := range np {
		if hits[r] != len(oracle[r]) {
			t.Errorf("rank %d hit the breakpoint %d times, gdb %d", r, hits[r], len(oracle[r]))
		}
	}
	checkExits(t, d, stepsExitCode(np))
}

func matrixRemoved(t *testing.T, p *program, np int, mode string) {
	d := matrixLaunch(t, p, np, mode, "hammer", nil)
	var resp dap.SetBreakpointsResponseBody
	d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
		"breakpoints": []map[string]any{{"line": p.line(t, "hot"), "condition": "v >= 0"}}}, &resp)
	if len(resp.Breakpoints) != 1 || !resp.Breakpoints[0].Verified {
		t.Fatalf("setBreakpoints: %+v", resp)
	}
	d.call("configurationDone", nil, nil)
	st := stoppedEvent(t, d)
	if st.Reason != "breakpoint" {
		t.Fatalf("first stop %+v, want the breakpoint", st)
	}
	d.setBreakpoints(p.src)
	d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	// In stop modes rank and thread, other ranks and threads may have stopped at the
	// breakpoint before it was removed: each is continued. No other stop may come.
	for stops := 1; ; stops++ {
		m, err := d.c.WaitAny([]string{"stopped", "terminated"}, time.Minute, focusStop)
		if err != nil {
			t.Fatalf("after %d stops: %v", stops, err)
		}
		if m.Event == "terminated" {
			break
		}
		var st dap.StoppedEventBody
		if err := m.Decode(&st); err != nil {
			t.Fatal(err)
		}
		if st.Reason != "breakpoint" || mode == "all" {
			t.Fatalf("stop %d after the breakpoint was removed: %+v (%s)", stops, st, st.Text)
		}
		d.call("continue", map[string]any{"threadId": st.ThreadId}, nil)
	}
	checkExits(t, d, func(rank int) int { return rank % 8 })
}
