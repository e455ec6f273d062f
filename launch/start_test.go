package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// The workload manager follows the request: srun and Slurm steps need Slurm, the rest is local
// unless HPCDAP_WLM says otherwise.
func TestWLMFor(t *testing.T) {
	t.Setenv("HPCDAP_WLM", "")
	for _, c := range []struct {
		req  Request
		want string
	}{
		{Request{Launcher: "srun"}, "slurm"},
		{Request{Launcher: "/usr/bin/srun"}, "slurm"},
		{Request{SlurmJob: "4.0"}, "slurm"},
		{Request{Launcher: "mpirun"}, "local"},
		{Request{Launcher: "mpiexec.hydra"}, "local"},
	} {
		if got := WLMFor(c.req); got != c.want {
			t.Errorf("WLMFor(%+v) = %s, want %s", c.req, got, c.want)
		}
	}
	t.Setenv("HPCDAP_WLM", "slurm")
	if got := WLMFor(Request{Launcher: "mpirun"}); got != "slurm" {
		t.Errorf("with HPCDAP_WLM=slurm: %s", got)
	}
}

// Start with NP: the launcher gets its own spelling of the rank count, the job is held, one
// agent serves it, and after Release (no tool attached) the job runs to its end.
func TestStartLocal(t *testing.T) {
	prog := program(t, "mpich")
	testenv.NeedTool(t, "mpiexec.hydra", "mpich")
	fe := newFrontend(t, "local", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, g, err := Start(ctx, fe, Request{Launcher: "mpiexec.hydra", NP: 3, Program: prog})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if len(app.Procs()) != 3 || len(g.Endpoints) != 1 || len(g.Endpoints[0].Ranks) != 3 {
		t.Fatalf("procs %+v, agents %+v", app.Procs(), g.Endpoints)
	}
	// A local session: libraries with their dependencies, a library directory.
	fix := libsFixture(t)
	s, err := app.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := s.NewManifest()
	if err := m.AddLibrary(filepath.Join(fix, "lib", "libouter_plain.so")); err == nil {
		t.Error("AddLibrary of a library whose dependency cannot be found: no error")
	}
	m = s.NewManifest()
	if err := m.AddLibrary(filepath.Join(fix, "lib", "libouter.so")); err != nil {
		t.Fatal(err)
	}
	if err := m.AddLibDir(filepath.Join(fix, "decoy")); err != nil {
		t.Fatal(err)
	}
	shipped, err := s.Ship(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[lib/decoy/libinner.so.1 lib/libinner.so.1 lib/libouter.so]"; fmt.Sprint(shipped) != want {
		t.Errorf("shipped %v, want %s", shipped, want)
	}
	// A session of this host gets copies of the files, each with its source's permission bits.
	sources := map[string]string{}
	for _, f := range m.Files() {
		sources[f.Dest] = f.Source
	}
	for _, f := range shipped {
		got, err := os.ReadFile(filepath.Join(s.Dir, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		want, _ := os.ReadFile(sources[f])
		st, _ := os.Stat(filepath.Join(s.Dir, f))
		src, _ := os.Stat(sources[f])
		if !bytes.Equal(got, want) || st.Mode() != src.Mode() || os.SameFile(st, src) {
			t.Errorf("%s: %d bytes, mode %v (same file %v); want a copy of %s: %d bytes, mode %v",
				f, len(got), st.Mode(), os.SameFile(st, src), sources[f], len(want), src.Mode())
		}
	}
	if env := fmt.Sprint(s.Env()); !strings.Contains(env, "LD_LIBRARY_PATH="+s.Dir+"/lib:"+s.Dir+"/lib/decoy") {
		t.Errorf("session environment %s lacks the library directory", env)
	}
	// A clash: another file for the same session path.
	m2 := s.NewManifest()
	other := filepath.Join(t.TempDir(), "libouter.so")
	os.WriteFile(other, []byte("x"), 0o644)
	m2.add("lib/libouter.so", other)
	if _, err := s.Ship(ctx, m2); err == nil {
		t.Error("a second source for lib/libouter.so was accepted")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("%s after Close: %v", s.Dir, err)
	}
	if err := app.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := app.Wait(ctx)
	if err != nil || !st.Exited() {
		t.Fatalf("Wait: %v, %v", st, err)
	}
	if _, _, err := Start(ctx, fe, Request{LauncherPid: 1, SlurmJob: "1.0"}); err == nil {
		t.Error("a request with both a pid and a step was accepted")
	}
	if _, err := exec.LookPath("mpirun.openmpi"); err == nil {
		if a, err := npArgs("mpirun.openmpi", 4); err != nil || len(a) != 2 || a[0] != "-np" {
			t.Errorf("npArgs(mpirun.openmpi) = %v, %v", a, err)
		}
	}
}
