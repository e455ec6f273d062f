//go:build pmix

package adapter

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The agents of an Open MPI 5 job are started by its launcher as PMIx debugger daemons, one
// per node, each taking its node's ranks from the launcher's local proc table: every rank,
// held in MPI_Init, is traced by an agent that descends from the launcher (not from the front
// end), stops at a breakpoint after MPI_Init with its own rank number in `rank`, and the
// session's end — a detach that lets the job finish, or a terminate that ends it — leaves no
// rank stopped or traced and no agent behind.
func TestPMIxAgentsCospawned(t *testing.T) {
	p := needOpenMPI5(t)
	for _, tc := range []struct {
		np        int
		terminate bool
	}{{4, false}, {16, true}, {4, true}, {16, false}} {
		name := fmt.Sprintf("np%d/detach", tc.np)
		if tc.terminate {
			name = fmt.Sprintf("np%d/terminate", tc.np)
		}
		t.Run(name, func(t *testing.T) {
			d := newDAP(t, viaPipe)
			defer d.close()
			done := t.TempDir()
			d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": tc.np, "env": ompi5Env,
				"args": []string{"-", done}, "stopMode": "rank"})
			waitOutput(t, d, "agents started by the launcher as PMIx debugger daemons")
			d.setBreakpoints(p.src, p.line(t, "after_init"))
			d.call("configurationDone", nil, nil)
			tids := waitBreakpointStops(t, d, tc.np)
			agents := map[int]bool{} // the agents' processes: tracers and their supervisors
			launcher := 0
			for _, r := range d.ranks().Ranks {
				parent, _ := strconv.Atoi(procStatus(r.Pid, "PPid"))
				if launcher == 0 {
					launcher = parent
				}
				tracer, _ := strconv.Atoi(procStatus(r.Pid, "TracerPid"))
				if tracer == 0 {
					t.Fatalf("rank %d (pid %d) is not traced at the breakpoint", r.Rank, r.Pid)
				}
				chain := ancestors(tracer)
				if !containsInt(chain, parent) {
					t.Fatalf("rank %d (pid %d) is traced by %d, whose ancestors %v do not include the launcher %d: not a daemon the launcher started",
						r.Rank, r.Pid, tracer, chain, parent)
				}
				for _, a := range append([]int{tracer}, chain...) {
					if a == parent {
						break
					}
					agents[a] = true
				}
				frames := d.stackTrace(tids[r.Rank])
				if len(frames) == 0 || frames[0].Line != p.line(t, "after_init") {
					t.Fatalf("rank %d stopped at %v, want line %d", r.Rank, frameNames(frames), p.line(t, "after_init"))
				}
				var ev struct {
					Result string `json:"result"`
				}
				d.call("evaluate", map[string]any{"expression": "rank", "frameId": frames[0].Id, "context": "watch"}, &ev)
				if ev.Result != strconv.Itoa(r.Rank) {
					t.Errorf("rank %d: rank = %q", r.Rank, ev.Result)
				}
			}
			ranks := d.ranks().Ranks
			d.call("disconnect", map[string]any{"terminateDebuggee": tc.terminate}, nil)
			var left []string
			for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				left = left[:0]
				for _, r := range ranks {
					st := procStatus(r.Pid, "State")
					switch {
					case st == "" || strings.HasPrefix(st, "Z"):
					case tc.terminate:
						left = append(left, fmt.Sprintf("rank %d (pid %d) still runs: %s", r.Rank, r.Pid, st))
					case strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T"):
						left = append(left, fmt.Sprintf("rank %d (pid %d) in state %s", r.Rank, r.Pid, st))
					default:
						if tr := procStatus(r.Pid, "TracerPid"); tr != "0" && tr != "" {
							left = append(left, fmt.Sprintf("rank %d (pid %d) traced by %s", r.Rank, r.Pid, tr))
						}
					}
					if !tc.terminate {
						if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r.Rank))); err != nil {
							left = append(left, fmt.Sprintf("rank %d not finished", r.Rank))
						}
					}
				}
				for a := range agents {
					if st := procStatus(a, "State"); st != "" && !strings.HasPrefix(st, "Z") {
						left = append(left, fmt.Sprintf("agent process %d still runs: %s", a, st))
					}
				}
				if st := procStatus(launcher, "State"); st != "" && !strings.HasPrefix(st, "Z") {
					left = append(left, fmt.Sprintf("launcher %d still runs: %s", launcher, st))
				}
				if len(left) == 0 {
					return
				}
			}
			t.Fatalf("after the disconnect: %s", strings.Join(left, "; "))
		})
	}
}

// ancestors lists pid's parent, its parent, and so on up to init.
func ancestors(pid int) []int {
	var out []int
	for pid > 1 {
		pid, _ = strconv.Atoi(procStatus(pid, "PPid"))
		if pid <= 0 {
			break
		}
		out = append(out, pid)
	}
	return out
}

func containsInt(list []int, x int) bool {
	for _, v := range list {
		if v == x {
			return true
		}
	}
	return false
}
