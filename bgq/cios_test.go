package bgq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
)

// TestCIOSAgentGivesBack runs hpcdap's agent as a CIOS tool of a job of 4 ranks on 2 compute
// nodes behind 2 I/O nodes, started by jobctld with BG_JOBID and BG_TOOLID and its session
// token in a 0600 file. A tool speaking CDTI to each agent over TCP (authenticated) reaches
// the ranks of that agent's I/O node through toolctld: it attaches, takes control, starts the
// job and stops each rank at a trap. Then the tool of I/O node 0 vanishes without a word, and
// the agents of both are ended by end_tool while the tool of I/O node 1 is still attached:
// in both cases the agent gives the ranks back — traps removed with their original
// instructions, control released, ranks detached — and every rank runs to its normal end
// (a trap left behind would kill it with SIGTRAP; a rank left stopped would never end).
func TestCIOSAgentGivesBack(t *testing.T) {
	t.Setenv("HPCDAP_TOKEN", "") // the token reaches the tool through its file only
	os.Unsetenv("HPCDAP_TOKEN")
	j, out := testJob(t, 4, 2, 1, nil)
	hpcdap, exe := built(t)
	work := workEntry(t, exe)
	token := "cios-test-token-0123456789abcdef"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := j.StartTool(hpcdap, []string{"agent", "--listen", "127.0.0.1:0", "--token-file", tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	// Each I/O node's agent says where it listens in the job's output.
	listening := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`)
	var addrs []string
	for deadline := time.Now().Add(time.Minute); len(addrs) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out)
			t.Fatalf("the CIOS agents did not both listen within a minute:\n%s", b)
		}
		b, _ := os.ReadFile(out)
		addrs = nil
		for _, m := range listening.FindAllStringSubmatch(string(b), -1) {
			addrs = append(addrs, m[1])
		}
	}
	ctx := context.Background()
	// The tool of each I/O node: the agent whose Attach to the node's first rank succeeds.
	tools := map[uint32]*cdti.Client{}
	for _, addr := range addrs {
		c, err := cdti.Dial(ctx, "tcp", addr, cdti.ClientOptions{ToolID: id, JobID: j.ID(), Token: []byte(token), Timeout: time.Minute})
		if err != nil {
			t.Fatalf("dial the CIOS agent at %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
		for node := uint32(0); node < 2; node++ {
			if tools[node] != nil {
				continue
			}
			ack, err := c.Attach(ctx, node*2, cdti.RanksInNode, cdti.NewTag("ciostest"), 50)
			if err == nil && ack.ReturnCode == cdti.Success {
				if fmt.Sprint(ack.Ranks) != fmt.Sprint([]uint32{node * 2, node*2 + 1}) {
					t.Fatalf("attach node %d through %s: ranks %v", node, addr, ack.Ranks)
				}
				tools[node] = c
				break
			}
		}
	}
	if len(tools) != 2 {
		t.Fatalf("the two agents reach %d compute nodes", len(tools))
	}
	// A message toolctld does not take is refused by the agent as toolctld would.
	if _, err := tools[0].TargetInfo(ctx, 0); err == nil {
		t.Errorf("an extension through the CIOS agent: no error")
	}
	for node, c := range tools {
		for r := node * 2; r < node*2+2; r++ {
			ca, err := c.Control(ctx, r, cdti.Control{NotifySet: cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP)),
				SendSignal: uint32(syscall.SIGSTOP), DynamicNotify: cdti.DynamicNotifyStart})
			if err != nil || ca.ReturnCode != cdti.Success {
				t.Fatalf("control rank %d: %v %+v", r, err, ca)
			}
		}
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	// Every rank stops at its start, gets the trap, and stops at it.
	for node, c := range tools {
		trapped := 0
		for trapped < 2 {
			n := nextNotify(t, c)
			switch {
			case n.Kind == cdti.NotifyTypeSignal && n.Signal.Signal == uint32(syscall.SIGSTOP):
				update(t, c, n.Rank, &cdti.SetBreakpoint{Addr: work, Instruction: ppc64.TrapWordCNK})
				update(t, c, n.Rank, &cdti.SetContinuationSignal{}, &cdti.ContinueProcess{})
			case n.Kind == cdti.NotifyTypeSignal && n.Signal.Reason == cdti.SignalBreakpoint && n.Signal.InstAddress == work:
				trapped++
			default:
				t.Fatalf("node %d rank %d: unexpected notify %+v", node, n.Rank, n)
			}
		}
	}
	// The tool of I/O node 0 vanishes; the agents are then ended while the other is attached.
	tools[0].Close()
	// Node 0's ranks run to their end by that give-back alone, the other tool still there.
	waitFor(t, "node 0's ranks to end after their tool vanished", func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), "rank 0 sum 242\n") && strings.Contains(string(b), "rank 1 sum 248\n")
	})
	if err := j.EndTool(id, 30*time.Second); err != nil {
		t.Fatalf("end_tool: %v", err)
	}
	got := waitOutput(t, j, out)
	for r := 0; r < 4; r++ {
		if want := fmt.Sprintf("rank %d sum %d\n", r, 6*r+242); !strings.Contains(got, want) {
			t.Errorf("output lacks %q (the rank did not run to its end):\n%s", want, got)
		}
	}
	if strings.Contains(got, "give back") {
		t.Errorf("a give-back step failed:\n%s", got)
	}
}
