package launch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/launch/pmix"
)

// The protocol a launch takes is chosen from what the launcher offers, an explicit one is
// checked against it, and a launcher that offers nothing usable is refused at once with what
// was tried.
func TestChooseProtocol(t *testing.T) {
	fe, err := NewFrontend(Options{WLM: "local", WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	ctx := context.Background()
	choose := func(launcher string, want Protocol) (Protocol, error) {
		path, family, err := launcherPath(launcher)
		if err != nil {
			t.Fatal(err)
		}
		return chooseProtocol(ctx, fe, path, family, want)
	}
	if mpirun, err := exec.LookPath("mpirun.openmpi"); err == nil && openMPIMajor(launcherVersion(ctx, mpirun)) == 4 {
		if p, err := choose(mpirun, ""); p != ProtocolMPIR || err != nil {
			t.Errorf("Open MPI 4 mpirun: %q, %v; want MPIR", p, err)
		}
		// A PMIx tool connection crashes Open MPI 4's mpirun: never attempted.
		if _, err := choose(mpirun, ProtocolPMIx); err == nil {
			t.Errorf("Open MPI 4 mpirun with pmix asked for: accepted")
		}
		if _, err := choose(mpirun, ProtocolFollow); err == nil || !strings.Contains(err.Error(), "hydra") {
			t.Errorf("Open MPI 4 mpirun with follow asked for: %v", err)
		}
	}
	if hydra, err := exec.LookPath("mpiexec.hydra"); err == nil {
		if p, err := choose(hydra, ""); p != ProtocolFollow || err != nil {
			t.Errorf("hydra: %q, %v; want follow", p, err)
		}
		if _, err := choose(hydra, ProtocolPMIx); err == nil || !strings.Contains(err.Error(), `"follow"`) {
			t.Errorf("hydra with pmix asked for: %v", err)
		}
	}
	// A program named like a PRRTE launcher that has neither MPIR symbols nor anything to
	// speak PMIx with: the error names both.
	fake := filepath.Join(t.TempDir(), "prterun")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'prterun (PMIx Reference RunTime Environment) 3.0.9'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := choose(fake, "")
	switch {
	case pmix.Built:
		if p != ProtocolPMIx || err != nil {
			t.Errorf("prterun: %q, %v; want PMIx", p, err)
		}
	case err == nil || !strings.Contains(err.Error(), "no MPIR symbols") || !strings.Contains(err.Error(), "built without PMIx") ||
		!strings.Contains(err.Error(), "prterun (PMIx Reference RunTime Environment 3.0.9)"):
		t.Errorf("prterun without PMIx built in: %q, %v; want an error naming the launcher, no MPIR and no PMIx", p, err)
	}
	if _, err := choose("/bin/true", ""); err == nil || !strings.Contains(err.Error(), "not a launcher") {
		t.Errorf("/bin/true: %v; want it refused", err)
	}
}

func TestOpenMPIMajor(t *testing.T) {
	for v, want := range map[string]int{"Open MPI 5.0.7": 5, "OpenRTE 4.1.4": 4, "PMIx Reference RunTime Environment 3.0.9": 0, "": 0} {
		if got := openMPIMajor(v); got != want {
			t.Errorf("openMPIMajor(%q) = %d, want %d", v, got, want)
		}
	}
}

// A PMIx job's exit status becomes the wait status of an exit with that code; a PMIx error
// code (negative) or anything past 255 becomes 255.
func TestPMIxStatus(t *testing.T) {
	for st, want := range map[int]int{0: 0, 3: 3, 137: 137, 143: 143, -52: 255, 300: 255} {
		ws := pmixStatus(st)
		if ws.Signaled() || ws.ExitCode() != want {
			t.Errorf("pmixStatus(%d) = exit %d (signalled %v), want exit %d", st, ws.ExitCode(), ws.Signaled(), want)
		}
	}
}

// TestIsLauncher: what `hpcdap stacks -- CMD` attaches through its launcher, by the names the
// launch request knows.
func TestIsLauncher(t *testing.T) {
	for name, want := range map[string]bool{
		"mpirun": true, "/usr/bin/mpirun.openmpi": true, "prterun": true, "prte": true, "prun": true,
		"mpiexec.hydra": true, "srun": true, "./app": false, "/usr/bin/sleep": false, "mpirunner": false,
	} {
		if got := IsLauncher(name); got != want {
			t.Errorf("IsLauncher(%q) = %v, want %v", name, got, want)
		}
	}
}
