package adapter

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-dap"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// TestModulesOfRanksFromTheirAgents: four ranks on two agents load a library with dlopen and
// each stops on its own (stop mode rank) at a breakpoint in it that waited for the library:
// every rank's stack runs from the library's function into main, so that each rank's module
// list holds the library where that rank mapped it. The modules request lists the program,
// the library and libc where /proc/PID/maps maps them; read while the ranks run (so read
// anew), it costs one CDTI exchange: the agent walks the link map and answers it whole.
func TestModulesOfRanksFromTheirAgents(t *testing.T) {
	t.Parallel()
	main, plugin, so := compileDlopen(t)
	goFile := filepath.Join(t.TempDir(), "go")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": main.bin, "args": []string{so, goFile}, "np": 4, "ranksPerAgent": 2,
		"stopMode": "rank"})
	bps := d.setBreakpoints(plugin.src, plugin.line(t, "plugin-compute"))
	if len(bps) != 1 || bps[0].Verified {
		t.Fatalf("breakpoint before the library is loaded: %+v", bps)
	}
	d.call("configurationDone", nil, nil)
	for range 4 {
		if st := d.stopped(); st.Reason != "breakpoint" {
			t.Fatalf("stopped %+v", st)
		}
	}
	ranks := d.ranks().Ranks
	for _, r := range ranks {
		frames := d.stackTrace(r.ThreadID)
		if len(frames) != 2 || frames[0].Name != "plugin_compute" || frames[0].Line != plugin.line(t, "plugin-compute") ||
			frames[1].Name != "main" || frames[1].Line != main.line(t, "call-plugin") {
			t.Errorf("rank %d: stack %s", r.Rank, frameList(frames))
		}
	}
	d.setBreakpoints(plugin.src)
	for _, r := range ranks {
		d.call("continue", map[string]any{"threadId": r.ThreadID}, nil)
	}
	waitFor(t, "every rank running", func() bool {
		for _, r := range d.ranks().Ranks {
			if r.State != "running" {
				return false
			}
		}
		return true
	})

	// The last stack read was the last rank's: the modules request lists that rank's.
	before := *d.ranks().Messages
	var mods dap.ModulesResponseBody
	d.call("modules", map[string]any{}, &mods)
	after := *d.ranks().Messages
	if sent, recv := after.Sent-before.Sent, after.Received-before.Received; sent != 1 || recv != 1 {
		t.Errorf("modules of a running rank: %d CDTI messages sent, %d received; want 1 and 1", sent, recv)
	}
	last := ranks[len(ranks)-1]
	starts, err := testenv.ProcMapStarts(last.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mods.Modules {
		names = append(names, m.Name)
		real, err := filepath.EvalSymlinks(m.Path)
		if err != nil {
			continue // the vdso
		}
		if at, ok := starts[real]; !ok || !strings.HasPrefix(m.AddressRange, fmt.Sprintf("%#x-", at)) {
			t.Errorf("rank %d: module %s at %s; /proc/%d/maps maps it from %#x (found %v)", last.Rank, m.Path,
				m.AddressRange, last.Pid, at, ok)
		}
	}
	for _, want := range []string{filepath.Base(main.bin), filepath.Base(so), "libc.so.6"} {
		if !slices.Contains(names, want) {
			t.Errorf("modules %v: no %s", names, want)
		}
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.event("terminated")
	if out := allOutput(d); strings.Count(out, "plugin says 43") != 4 {
		t.Errorf("output %q, want four ranks saying 43", out)
	}
}

// TestModulesOverOneAnswer: a program that loads twenty libraries whose paths are near
// PATH_MAX has a link map over what one GetLinkMap may answer; the agent says so (never a
// list cut short) and the front end walks the map itself: the modules request still lists
// every library.
func TestModulesOverOneAnswer(t *testing.T) {
	t.Parallel()
	p := compileC(t, "../../procimage/testdata/linked")
	plugin := compileC(t, "plugin", "-shared", "-fPIC")
	dir := t.TempDir()
	for len(dir) < 3700 {
		dir = filepath.Join(dir, strings.Repeat("d", 250))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lib, err := os.ReadFile(plugin.bin)
	if err != nil {
		t.Fatal(err)
	}
	var libs []string
	for i := range 20 { // 20 names of over 3,700 bytes: over cdti.MaxLinkMapSize
		so := filepath.Join(dir, fmt.Sprintf("plugin%02d.so", i))
		if err := os.WriteFile(so, lib, 0o755); err != nil {
			t.Fatal(err)
		}
		libs = append(libs, so)
	}
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "args": libs})
	d.call("configurationDone", nil, nil)
	waitOutput(t, d, "ready")
	before := *d.ranks().Messages
	var mods dap.ModulesResponseBody
	d.call("modules", map[string]any{}, &mods)
	after := *d.ranks().Messages
	if sent := after.Sent - before.Sent; sent < 2+20 {
		t.Errorf("modules read with %d CDTI messages; want the answer refused, then the map walked (names and all)", sent)
	}
	for _, so := range libs {
		if !slices.ContainsFunc(mods.Modules, func(m dap.Module) bool { return m.Path == so }) {
			t.Errorf("no module %s among %d", filepath.Base(so), len(mods.Modules))
		}
	}
}
