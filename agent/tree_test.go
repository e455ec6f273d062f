package agent

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// TestTreeRelayAndGatherStacks puts two real agents in a tree: the parent serves rank 0 and
// relays for its child, which serves ranks 1 and 2 and which it authenticates to with the
// session token. A tool connected to the parent alone attaches and stops all three ranks
// (the child's notifications come up through the parent); GatherStacks then merges exactly
// the stacks each rank's own GetTraceback gives, across both agents. A tool attached to
// nothing gathers no rank: the agents unwind only ranks the asking tool may query.
func TestTreeRelayAndGatherStacks(t *testing.T) {
	parent := newHarness(t, "")
	parent.spawn(1, progBin)
	child := newHarness(t, "")
	out := newOutFile(t)
	if err := child.a.SpawnRanks(SpawnSpec{Argv: []string{progBin}, Stdio: []*os.File{nil, out.f, out.f}, FirstRank: 1, Count: 2}); err != nil {
		t.Fatal(err)
	}
	parent.a.router.SetChildren([]cdti.Route{{Addr: child.addr, Ranks: []uint32{1, 2}}})

	tt := parent.dial(5)
	for r := uint32(0); r < 3; r++ {
		tt.attach(r, 50, "tree")
		tt.control(r, int(syscall.SIGSTOP), cdti.DynamicNotifyStart)
	}
	stopped := map[uint32]bool{}
	for len(stopped) < 3 {
		n := tt.notify()
		if n.Kind != cdti.NotifyTypeSignal || n.Signal.Signal != uint32(syscall.SIGSTOP) {
			t.Fatalf("notification %+v, want a SIGSTOP", n)
		}
		stopped[n.Rank] = true
	}
	own := map[uint32][]uint64{}
	for r := uint32(0); r < 3; r++ {
		frames, err := tt.c.Traceback(ctx(), r, 0, 0)
		if err != nil {
			t.Fatalf("rank %d through the parent: %v", r, err)
		}
		for _, f := range frames {
			own[r] = append(own[r], f.PC)
		}
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tree, err := tt.c.GatherStacks(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := tree.Paths(); !maps.EqualFunc(got, own, slices.Equal) {
		t.Fatalf("merged stacks %x, the ranks' own %x", got, own)
	}
	if len(tree.Unreachable) != 0 {
		t.Errorf("unreachable %v", tree.Unreachable)
	}

	other := parent.dial(6)
	tree, err = other.c.GatherStacks(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tree.Ranks.Count() != 0 {
		t.Errorf("a tool attached to nothing gathered ranks %v", tree.Ranks)
	}
}

// TestTreeCollectiveQuietStop drives three real multi-threaded ranks on two agents (parent rank 0, child
// ranks 1 and 2) with Collectives sent to the parent alone: a continue answered by one group
// of every rank, then a quiet stop whose one answer reports every rank stopped (Reported:
// no Notify was sent) while /proc shows every thread of the three processes stopped; a plain
// StopProcess of rank 1 then sends that rank's stop as a Notify after all; a last continue
// lets them all run again.
func TestTreeCollectiveQuietStop(t *testing.T) {
	parent := newHarness(t, "")
	parent.spawn(1, threadsBin, "1", "forever")
	child := newHarness(t, "")
	out := newOutFile(t)
	if err := child.a.SpawnRanks(SpawnSpec{Argv: []string{threadsBin, "1", "forever"}, Stdio: []*os.File{nil, out.f, out.f}, FirstRank: 1, Count: 2}); err != nil {
		t.Fatal(err)
	}
	parent.a.router.SetChildren([]cdti.Route{{Addr: child.addr, Ranks: []uint32{1, 2}}})
	pids := []int{parent.rankPid(0), child.rankPid(1), child.rankPid(2)}
	tt := parent.dial(5)
	for r := uint32(0); r < 3; r++ {
		tt.attach(r, 50, "tree")
		tt.control(r, int(syscall.SIGSTOP), cdti.DynamicNotifyStart)
	}
	for range 3 {
		if n := tt.notify(); n.Kind != cdti.NotifyTypeSignal {
			t.Fatalf("notification %+v", n)
		}
	}
	all := cdti.RanksOf(0, 1, 2)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	one := func(what string, flags cdti.CollectiveFlags, cmd cdti.Command) cdti.Result {
		t.Helper()
		a, err := tt.c.Collective(c, flags, all, cmd)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(a.Groups) != 1 || !a.Groups[0].Ranks.Equal(all) || len(a.Unreachable) != 0 || a.Groups[0].Code != cdti.Success {
			t.Fatalf("%s: %+v, want one group of ranks 0-2", what, a)
		}
		return a.Groups[0].Results[0]
	}
	if r := one("continue", 0, &cdti.ContinueProcess{}); r.Code != cdti.CmdSuccess {
		t.Fatalf("continue: %v", r.Code)
	}
	r := one("quiet stop", cdti.CollectiveQuietStop, &cdti.StopProcess{})
	if st, ok := r.Ack.(*cdti.StopProcessAck); r.Code != cdti.CmdSuccess || !ok || !st.Reported {
		t.Fatalf("quiet stop: %v %#v, want Reported", r.Code, r.Ack)
	}
	for i, pid := range pids {
		for tid, s := range taskStates(t, pid) {
			if s != 't' {
				t.Fatalf("rank %d thread %d in state %c after the quiet stop, want t", i, tid, s)
			}
		}
	}
	if ok, err := tt.c.StopProcess(c, 1); err != nil || !ok {
		t.Fatalf("plain stop of rank 1 stopped quietly: %v %v, want a Notify to follow", ok, err)
	}
	if n := tt.notify(); n.Rank != 1 || n.Signal.Reason != cdti.SignalInterrupt {
		t.Fatalf("notification %+v, want rank 1's interrupt", n)
	}
	if r := one("continue", 0, &cdti.ContinueProcess{}); r.Code != cdti.CmdSuccess {
		t.Fatalf("last continue: %v", r.Code)
	}
}

// TestParentLinkHeldForGrace: the management connection of the agent above counts as the
// front end's, and one that breaks without a shutdown (the agent above lost) still counts
// for the grace in which the nearest live ancestor connects in its place. An agent with
// --kill-on-exit whose front end has left and whose parent's link breaks keeps its rank
// running through the grace; a new connection within it (the adopter) keeps it after the
// grace, and once that one leaves too the rank dies with the agent. Without an adopter the
// rank dies once the grace is over.
func TestParentLinkHeldForGrace(t *testing.T) {
	for _, adopted := range []bool{true, false} {
		t.Run(map[bool]string{true: "adopted", false: "orphaned"}[adopted], func(t *testing.T) {
			child := newKillHarness(t, true)
			child.a.parentGrace = 3 * time.Second
			pid, tt := runRank(t, child)
			fe, _ := dialMgmt(t, child.addr)
			tt.c.Close() // detached: the rank runs on
			parent := newHarness(t, "")
			if _, err := parent.a.setChildren([]cdti.Route{{Addr: child.addr}}); err != nil {
				t.Fatal(err)
			}
			fe.nc.Close() // the front end keeps the root's connection alone
			waitRunning(t, pid)
			parent.a.below.Close() // as the parent's death leaves it: no shutdown
			time.Sleep(300 * time.Millisecond)
			waitRunning(t, pid)
			if !adopted {
				select {
				case <-child.a.Done():
				case <-time.After(20 * time.Second):
					t.Fatal("the agent did not end after the grace")
				}
				waitDead(t, pid)
				return
			}
			adopter, _ := dialMgmt(t, child.addr)
			time.Sleep(3500 * time.Millisecond) // past the grace
			waitRunning(t, pid)
			select {
			case <-child.a.Done():
				t.Fatal("the agent ended with an adopter connected")
			default:
			}
			adopter.nc.Close()
			select {
			case <-child.a.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the agent did not end when its last front end left")
			}
			waitDead(t, pid)
		})
	}
}

// TestShutdownPastFrozenAgent: an agent that ends tells the agents below it to end, and one
// that does not answer (frozen: SIGSTOP) cannot tell its own, so it tells them in its place.
// A tree top → mid → leaf, mid a real agent process: frozen, then top ends; the leaf ends
// too, and top's log says it asked the agent below mid.
func TestShutdownPastFrozenAgent(t *testing.T) {
	leaf := newHarness(t, "")
	leaf.spawn(1, progBin, "loop", "1")
	mid := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, "--listen", "127.0.0.1:0", "--", progBin, "loop", "1")
	midAddr := mid.listening(t)
	top := newHarness(t, "")
	if _, err := top.a.setChildren([]cdti.Route{{Addr: midAddr, Children: []cdti.Route{{Addr: leaf.addr}}}}); err != nil {
		t.Fatal(err)
	}
	freeze(t, mid.cmd.Process.Pid)
	defer mid.cmd.Process.Signal(syscall.SIGCONT)
	go top.a.Shutdown(false)
	select {
	case <-leaf.a.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the agent below the frozen one did not end; top's log:\n%s", top.logBuf.String())
	}
	if !strings.Contains(top.logBuf.String(), "asking the 1 agent(s) below it") {
		t.Errorf("top's log does not say it asked the agent below the frozen one:\n%s", top.logBuf.String())
	}
}

// TestTreeNamesAgentThatDoesNotAnswer: told a tree top → mid → leaf whose leaf does not
// answer (a real agent process, frozen), top fails in its time and names the leaf, not mid:
// mid has less time than top, by its height.
func TestTreeNamesAgentThatDoesNotAnswer(t *testing.T) {
	leaf := startAgentBinary(t, []string{"HPCDAP_TOKEN=" + testToken}, "--listen", "127.0.0.1:0", "--", progBin, "loop", "1")
	leafAddr := leaf.listening(t)
	freeze(t, leaf.cmd.Process.Pid)
	defer leaf.cmd.Process.Signal(syscall.SIGCONT)
	mid := newHarness(t, "")
	top := newHarness(t, "")
	mid.a.treeTimeout, top.a.treeTimeout = 3*time.Second, 3*time.Second
	_, err := top.a.setChildren([]cdti.Route{{Addr: mid.addr, Children: []cdti.Route{{Addr: leafAddr}}}})
	if err == nil || !strings.Contains(err.Error(), "connect to agent "+leafAddr) {
		t.Fatalf("tree with a frozen leaf: %v, want an error naming the leaf %s", err, leafAddr)
	}
}

// TestTreeKeepsGivenRanks: a child's route that names its ranks (the session's part of an
// agent's) keeps them; one that names none gets the child's own.
func TestTreeKeepsGivenRanks(t *testing.T) {
	child := newHarness(t, "")
	child.spawn(2, progBin, "loop", "1")
	other := newHarness(t, "")
	other.spawn(1, progBin, "loop", "1")
	top := newHarness(t, "")
	res, err := top.a.setChildren([]cdti.Route{{Addr: child.addr, Ranks: []uint32{1}}, {Addr: other.addr}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Agents) != 2 || len(res.Agents[0].Ranks) != 2 {
		t.Errorf("tree answer %+v, want both agents, the first with its 2 ranks", res.Agents)
	}
	got := top.a.router.Children()
	if len(got) != 2 || !slices.Equal(got[0].Ranks, []uint32{1}) || !slices.Equal(got[1].Ranks, []uint32{0}) {
		t.Errorf("routes %+v, want the given rank 1, then the other's own rank 0", got)
	}
}

// freeze stops process pid (SIGSTOP) and waits until every thread of it has stopped: the
// signal is sent at once, but a thread running on another processor stops a moment later.
func freeze(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		stopped := true
		for _, st := range taskStates(t, pid) {
			stopped = stopped && st == 'T'
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not stopped: %v", pid, taskStates(t, pid))
		}
		time.Sleep(time.Millisecond)
	}
}
