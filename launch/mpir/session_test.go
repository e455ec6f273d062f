package mpir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// Launch mode over CDTI through a real agent: mpirun, spawned by the agent and held before its
// first instruction, is driven to MPIR_Breakpoint; the table names the ranks the process tree
// shows (descendants of mpirun running the program, with OMPI_COMM_WORLD_RANK); after Release
// the job completes and the launcher's exit is seen.
func TestLaunchOpenMPIOverAgent(t *testing.T) {
	need(t, ompiProg, agentBin)
	mpirun := testenv.NeedTool(t, "mpirun.openmpi", "openmpi-bin")
	a := startAgent(t, ompiEnv(), mpirun, "-np", "4", ompiProg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	s, err := Launch(ctx, a.client, Options{})
	if err != nil {
		s.Abandon()
		t.Fatalf("Launch: %v", err)
	}
	if !strings.Contains(s.Symbols().File.Path, "libopen-rte") || s.Symbols().File.Source != SourceDynsym {
		t.Errorf("symbols from %s (%s), want libopen-rte's .dynsym", s.Symbols().File.Path, s.Symbols().File.Source)
	}
	procs, err := s.WaitSpawned(ctx)
	if err != nil {
		s.Abandon()
		t.Fatalf("WaitSpawned: %v", err)
	}
	// The oracle: the process tree under the launcher.
	launcherPid := 0
	if info, err := a.client.TargetInfo(ctx, 0); err == nil {
		launcherPid = int(info.Pid)
	}
	tree := rankPids(t, launcherPid, ompiProg, "OMPI_COMM_WORLD_RANK")
	if len(procs) != 4 || len(tree) != 4 {
		s.Abandon()
		t.Fatalf("table %+v; process tree %v: want 4 ranks in both", procs, tree)
	}
	host, _ := os.Hostname()
	want, _ := filepath.EvalSymlinks(ompiProg)
	for _, p := range procs {
		if tree[p.Rank] != p.Pid {
			t.Errorf("rank %d: table pid %d, process tree pid %d", p.Rank, p.Pid, tree[p.Rank])
		}
		if p.Host != host {
			t.Errorf("rank %d: host %q, want %q", p.Rank, p.Host, host)
		}
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(p.Pid) + "/exe"); exe != want {
			t.Errorf("rank %d: /proc/%d/exe = %s, want %s", p.Rank, p.Pid, exe, want)
		}
		if filepath.Base(p.Executable) != filepath.Base(ompiProg) {
			t.Errorf("rank %d: executable_name %q", p.Rank, p.Executable)
		}
	}
	if err := s.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	st, err := s.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if !st.Exited() {
		t.Errorf("mpirun status %v, want a normal exit", st)
	}
	out, _ := os.ReadFile(a.out)
	for r := range 4 {
		if !strings.Contains(string(out), "rank "+strconv.Itoa(r)+"/4") {
			t.Errorf("output lacks rank %d:\n%s", r, out)
		}
	}
}

// A launcher without MPIR symbols (a plain program) makes Launch fail with ErrNoSymbols, and
// Abandon lets the program run to its end.
func TestLaunchWithoutSymbols(t *testing.T) {
	need(t, agentBin)
	a := startAgent(t, os.Environ(), "/bin/sh", "-c", "exit 3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Launch(ctx, a.client, Options{})
	if !errors.Is(err, ErrNoSymbols) {
		t.Fatalf("Launch(/bin/sh) = %v, want ErrNoSymbols", err)
	}
	if err := s.Abandon(); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	st, err := s.Wait(ctx)
	if err != nil || !st.Exited() || st.ExitCode() != 3 {
		t.Errorf("after Abandon: status %v, %v; want exit 3", st, err)
	}
}
