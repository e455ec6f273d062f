package mpir

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// Open MPI 4's mpirun co-spawns the tool's daemon (MPIR_executable_path and
// MPIR_server_arguments written by Launch) before MPIR_Breakpoint: the daemon runs with the
// arguments given, one per node, while the ranks are in the table.
func TestToolDaemonsOpenMPI(t *testing.T) {
	need(t, ompiProg, agentBin)
	mpirun := testenv.NeedTool(t, "mpirun.openmpi", "openmpi-bin")
	dir := t.TempDir()
	daemon := filepath.Join(dir, "daemon.sh")
	record := filepath.Join(dir, "args")
	script := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > " + record + ".$$\n"
	if err := os.WriteFile(daemon, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, ompiEnv(), mpirun, "-np", "2", ompiProg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"agent", "--connect", "127.0.0.1:9", "with space", "ü"}
	s, err := Launch(ctx, a.client, Options{Daemons: &ToolDaemons{Path: daemon, Args: args}})
	if err != nil {
		s.Abandon()
		t.Fatalf("Launch: %v", err)
	}
	procs, err := s.WaitSpawned(ctx)
	if err != nil || len(procs) != 2 {
		s.Abandon()
		t.Fatalf("WaitSpawned: %v, %+v", err, procs)
	}
	// The daemon was started before the table was announced; it writes its record when it
	// runs, which the launcher does not wait for.
	var recs []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		recs, _ = filepath.Glob(record + ".*")
		if b, _ := os.ReadFile(first(recs)); len(recs) > 0 && strings.HasSuffix(string(b), "\n") &&
			strings.Count(string(b), "\n") == len(args) || time.Now().After(deadline) {
			break
		}
	}
	if len(recs) != 1 {
		s.Abandon()
		t.Fatalf("%d daemon(s) started on this one node, want 1", len(recs))
	}
	b, _ := os.ReadFile(recs[0])
	if got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"); !slices.Equal(got, args) {
		t.Errorf("the daemon's arguments %q, want %q", got, args)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if st, err := s.Wait(ctx); err != nil || !st.Exited() {
		t.Errorf("mpirun: %v, %v", st, err)
	}
}

// Arrays that do not fit the launcher's, and arguments MPIR_server_arguments cannot carry,
// are refused before anything is written.
func TestToolDaemonsRefused(t *testing.T) {
	runjob := &Symbols{ExecutablePath: 0x1000, ServerArguments: 0x2000, SubsetAttach: 0x3000}
	long := strings.Repeat("x", 256)
	for _, c := range []struct {
		d    ToolDaemons
		syms *Symbols
		want string
	}{
		{ToolDaemons{Path: "/" + long}, runjob, "does not fit the launcher's MPIR_executable_path[256]"},
		{ToolDaemons{Path: "/a", Args: []string{strings.Repeat("y", 1024)}}, runjob, "do not fit the launcher's MPIR_server_arguments[1024]"},
		{ToolDaemons{Path: "/a", Args: []string{"x", ""}}, runjob, "server argument 1 is empty"},
		{ToolDaemons{Path: "/a", Args: []string{"a\x00b"}}, runjob, "holds a NUL byte"},
		{ToolDaemons{Path: "/a", Subset: strings.Repeat("1 ", 2048)}, runjob, "MPIR_subset_attach[4096]"},
		{ToolDaemons{Path: "/a"}, &Symbols{}, ErrNoDaemonLaunch.Error()},
		{ToolDaemons{Path: "/a", Subset: "1-3"}, &Symbols{ExecutablePath: 1, ServerArguments: 2}, "takes no rank subset"},
	} {
		if _, _, _, err := c.d.arrays(c.syms); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: %v, want an error saying %q", c.d.Path, err, c.want)
		}
	}
	// The longest that fits does.
	if _, _, _, err := (&ToolDaemons{Path: "/" + long[:254]}).arrays(runjob); err != nil {
		t.Errorf("a path of 255 bytes: %v", err)
	}
}

// FuzzServerArguments: whatever the bytes, decoding gives an error or arguments that encode
// back to the bytes' prefix up to and including the terminating empty argument.
func FuzzServerArguments(f *testing.F) {
	for _, s := range []string{"\x00", "agent\x00--connect\x00h:1\x00\x00", "a\x00", "", "a\x00\x00junk"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		args, err := DecodeServerArguments(b)
		if err != nil {
			return
		}
		enc, err := EncodeServerArguments(args)
		if err != nil {
			t.Fatalf("decoded %q does not encode: %v", args, err)
		}
		if !strings.HasPrefix(string(b), string(enc)) {
			t.Fatalf("%q decodes to %q, which encodes to %q", b, args, enc)
		}
	})
}

// first is the first of names, or "".
func first(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}
