package adapter

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A disconnect before configurationDone, the ranks held inside MPI_Init with a breakpoint
// planted in code they reach after it, leaves nothing stopped or trapped: without
// terminateDebuggee every rank runs through that code to its normal end (a trap left there
// would kill it); with it, the ranks are gone.
func TestMPIRunDisconnectBeforeConfigurationDone(t *testing.T) {
	needTool(t, "mpirun.openmpi")
	p := compileMPI(t, "mpicc.openmpi")
	const np = 2
	for _, terminate := range []bool{false, true} {
		t.Run("terminate="+strconv.FormatBool(terminate), func(t *testing.T) {
			d := newDAP(t, viaPipe)
			defer d.close()
			done := t.TempDir()
			d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": np, "args": []string{"-", done},
				"env": ompiEnv, "stopMode": "rank"})
			if bps := d.setBreakpoints(p.src, p.line(t, "combine")); !bps[0].Verified {
				t.Fatalf("breakpoint not verified: %+v", bps[0])
			}
			pids := map[int]int{}
			for _, r := range d.ranks().Ranks {
				pids[r.Rank] = r.Pid
			}
			d.call("disconnect", map[string]any{"terminateDebuggee": terminate}, nil)
			deadline := time.Now().Add(90 * time.Second)
			for r := 0; r < np; r++ {
				for {
					_, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r)))
					if !terminate && err == nil {
						break
					}
					if st := procStatus(pids[r], "State"); terminate && (st == "" || st[0] == 'Z') {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("rank %d (pid %d) after the disconnect: state %q, TracerPid %q, finished %v", r, pids[r],
							procStatus(pids[r], "State"), procStatus(pids[r], "TracerPid"), err == nil)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			if terminate {
				for r := 0; r < np; r++ {
					if _, err := os.Stat(filepath.Join(done, "rank."+strconv.Itoa(r))); err == nil {
						t.Errorf("rank %d finished its run after a disconnect that terminates", r)
					}
				}
			}
		})
	}
}

// A rank killed before configurationDone is reported at once (its exit, its signal);
// configurationDone then lets the job go, mpirun ends it, and the session ends.
func TestMPIRunRankKilledBeforeConfigurationDone(t *testing.T) {
	needTool(t, "mpirun.openmpi")
	p := compileMPI(t, "mpicc.openmpi")
	const np = 2
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": np, "args": []string{"-"},
		"env": ompiEnv, "stopMode": "rank"})
	d.setBreakpoints(p.src, p.line(t, "after_init"))
	victim := d.ranks().Ranks[1]
	if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, d, "rank 1 exited: killed by SIGKILL")
	for _, r := range d.ranks().Ranks {
		if r.Rank == 1 && r.State != "exited" {
			t.Fatalf("rank 1 is %s after its end was reported, want exited", r.State)
		}
	}
	d.call("configurationDone", nil, nil)
	d.event("terminated")
	for _, r := range d.ranks().Ranks {
		if r.State != "exited" {
			t.Errorf("rank %d is %s after the session ended, want exited", r.Rank, r.State)
		}
	}
}
