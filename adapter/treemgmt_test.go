package adapter

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// TestTreeManagementPlane launches 8 ranks of chatter.c on 4 local agents (2 ranks each) at
// fan-out 2 (agent 0 → 1, 2; 1 → 3), each rank saying three lines on stdout and three on
// stderr, and stopping after the first of each. The front end connects to the root alone,
// which tells the agents below it their children: no other agent ever has a management
// connection from the front end, and once the job is up no connection at all. Then an agent
// is killed (kill -9), interior agent 1 or the root, and the one above it (the root, or the
// front end) connects to the agents below it in its place: the other ranks run to their end
// and each of their lines reaches the client exactly once (the replay of an adopted agent's
// history repeats nothing). The disconnect asks the root, or the agents the front end
// adopted, to end, and each agent ends the ones below it: every live agent logs its shutdown
// and ends.
func TestTreeManagementPlane(t *testing.T) {
	t.Parallel()
	p := compileC(t, "chatter")
	for _, lost := range []int{1, 0} {
		t.Run(fmt.Sprintf("agent%d", lost), func(t *testing.T) {
			t.Parallel()
			treeManagementPlane(t, p, lost)
		})
	}
}

func treeManagementPlane(t *testing.T, p *program, lost int) {
	d := newDAP(t, viaPipe)
	defer d.close()
	// Each rank stops on its own (stop mode rank) after its first round of lines.
	d.launch(map[string]any{"program": p.bin, "np": 8, "ranksPerAgent": 2, "fanout": 2, "stopMode": "rank"})
	src := p.src
	d.setBreakpoints(src, p.line(t, "said"))
	d.call("configurationDone", nil, nil)
	for range 8 {
		d.stopped()
	}
	ranks := d.ranks().Ranks
	agents := make([]int, 4) // agent i serves ranks 2i and 2i+1
	for i := range agents {
		agents[i] = parentPid(t, ranks[2*i].Pid)
		if got := parentPid(t, ranks[2*i+1].Pid); got != agents[i] {
			t.Fatalf("ranks %d and %d have parents %d and %d, want one agent", 2*i, 2*i+1, agents[i], got)
		}
	}
	// The agents' logs name each management connection: the front end made two, both to
	// the root (the start, and the one it keeps), and each other agent has its parent's.
	logs := d.agentLogs()
	if n := strings.Count(logs, `("hpcdap-adapter")`); n != 2 {
		t.Errorf("the front end made %d management connections, want 2 (to the root):\n%s", n, logs)
	}
	if n := strings.Count(logs, `("hpcdap-agent")`); n != 3 {
		t.Errorf("the agents made %d management connections, want 3 (one to each child):\n%s", n, logs)
	}
	for i, a := range agents {
		n := connectionsTo(t, os.Getpid(), a)
		if i == 0 && n == 0 {
			t.Errorf("no connection from the front end to the root agent (pid %d)", a)
		}
		if i > 0 && n != 0 {
			t.Errorf("the front end holds %d connection(s) to agent %d (pid %d), below the root", n, i, a)
		}
	}

	// Every rank said its first lines, those below the agent to be lost through it: they
	// are known above it when the agents below it are adopted, whose history replays them.
	var left []int
	for r := range 8 {
		if r/2 != lost {
			left = append(left, r)
			waitOutput(t, d, fmt.Sprintf("[%d] rank %d warns 0", r, r))
		}
	}
	if err := syscall.Kill(agents[lost], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitForExit(t, agents[lost])
	waitOutput(t, d, fmt.Sprintf("lost 2 of 8 ranks (an agent on the way to them is gone): %d-%d;", 2*lost, 2*lost+1))
	d.setBreakpoints(src)
	for _, r := range ranks {
		if r.Rank/2 != lost {
			d.call("continue", map[string]any{"threadId": r.ThreadID}, nil)
		}
	}
	if _, err := d.c.WaitEvent("terminated", time.Minute, nil); err != nil {
		t.Fatalf("%v; ranks %+v\noutput:\n%s", err, d.ranks().Ranks, allOutput(d))
	}
	var want []string
	for _, r := range left {
		for k := range 3 {
			want = append(want, fmt.Sprintf("[%d] rank %d says %d\n", r, r, k), fmt.Sprintf("[%d] rank %d warns %d\n", r, r, k))
		}
	}
	waitFor(t, "every line of the ranks not lost", func() bool {
		out := allOutput(d)
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	})
	out := allOutput(d)
	for _, w := range want {
		if n := strings.Count(out, w); n != 1 {
			t.Errorf("%q came %d times, want once; output:\n%s", w, n, out)
		}
	}

	d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	for i, a := range agents {
		if i != lost {
			waitForExit(t, a)
		}
	}
	logs = d.agentLogs()
	if n := strings.Count(logs, "agent: shut down: "); n != 3 {
		t.Errorf("%d agents logged their shutdown, want the 3 live ones:\n%s", n, logs)
	}
}

// connectionsTo counts the TCP connections process from holds to the listening ports of
// process agent: established rows of /proc/net/tcp{,6} whose socket is one of from's
// descriptors and whose remote port is one agent listens on.
func connectionsTo(t testing.TB, from, agent int) int {
	t.Helper()
	socks, err := testenv.TCPSockets()
	if err != nil {
		t.Fatal(err)
	}
	agentSockets, fromSockets := testenv.SocketInodes(agent), testenv.SocketInodes(from)
	listening := map[int]bool{}
	for _, s := range socks {
		if s.Listening() && agentSockets[s.Inode] {
			listening[s.LocalPort()] = true
		}
	}
	if len(listening) == 0 {
		t.Fatalf("agent pid %d listens on no TCP port", agent)
	}
	n := 0
	for _, s := range socks {
		if s.Established() && fromSockets[s.Inode] && listening[s.RemotePort()] {
			n++
		}
	}
	return n
}

// agentConnections counts the TCP connections this process holds to the agents of a local
// session: those of each rank's parent.
func agentConnections(t testing.TB, d *dapSession) int {
	t.Helper()
	agents := map[int]bool{}
	for _, r := range d.ranks().Ranks {
		agents[parentPid(t, r.Pid)] = true
	}
	n := 0
	for a := range agents {
		n += connectionsTo(t, os.Getpid(), a)
	}
	return n
}
