package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
	"github.com/hpcdap/hpcdap/examples"
)

// runDemo is `hpcdap demo`: it builds the bundled ring example, starts `hpcdap dap` as a
// child and holds a scripted debug session with it over stdio, printing what happens.
func runDemo(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	np := fs.Int("np", 4, "number of ranks")
	keep := fs.Bool("keep", false, "keep the build directory")
	raw := fs.Bool("raw", false, "also print every DAP message")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hpcdap demo [flags]")
		fmt.Fprintln(fs.Output(), "\nBuilds the bundled example (examples/ring/ring.c) with gcc and debugs it through")
		fmt.Fprintln(fs.Output(), "`hpcdap dap`: breakpoint, all ranks stopped, stacks, variables, merged parallel")
		fmt.Fprintln(fs.Output(), "stacks, a value compared across ranks, then the job runs to its end.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *np < 2 || *np > 64 {
		fmt.Fprintln(stderr, "hpcdap demo: --np must be between 2 and 64")
		return errUsage
	}
	d := &demo{out: stdout, np: *np, raw: *raw}
	dir, err := os.MkdirTemp("", "hpcdap-demo-*")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	return d.run(dir)
}

type demo struct {
	out    io.Writer
	np     int
	raw    bool
	c      *dapclient.Client
	cmd    *exec.Cmd
	source string
	bpLine int
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) step(format string, args ...any) {
	fmt.Fprintf(d.out, "\n▶ "+format+"\n", args...)
}

// breakMarker finds the demo's breakpoint line in the source.
const breakMarker = "the last rank closes the ring"

func (d *demo) run(dir string) error {
	d.say("hpcdap demo: one debug session for a %d-rank job, driven over the Debug Adapter Protocol", d.np)
	// Build the example.
	d.source = filepath.Join(dir, examples.RingFileName)
	if err := os.WriteFile(d.source, examples.RingSource, 0o644); err != nil {
		return err
	}
	for i, l := range strings.Split(string(examples.RingSource), "\n") {
		if strings.Contains(l, breakMarker) {
			d.bpLine = i + 1
		}
	}
	prog := filepath.Join(dir, "ring")
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		return errors.New("gcc not found: install it (make deps) to build the demo program")
	}
	d.step("build the example: gcc -g -O0 -o %s %s", prog, d.source)
	if out, err := exec.Command(gcc, "-g", "-O0", "-o", prog, d.source).CombinedOutput(); err != nil {
		return fmt.Errorf("gcc: %v\n%s", err, out)
	}
	// Start the adapter.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	d.cmd = exec.Command(exe, "dap", "--log", filepath.Join(dir, "adapter.log"))
	in, err := d.cmd.StdinPipe()
	if err != nil {
		return err
	}
	outp, err := d.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := d.cmd.Start(); err != nil {
		return err
	}
	defer func() {
		in.Close()
		done := make(chan struct{})
		go func() { d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
		}
	}()
	d.c = dapclient.New(outp, in)
	if d.raw {
		d.c.OnSend = func(b []byte) { fmt.Fprintf(d.out, "    → %s\n", b) }
		d.c.OnReceive = func(m *dapclient.Message) { fmt.Fprintf(d.out, "    ← %s\n", m.Raw) }
	}
	if err := d.script(prog, dir); err != nil {
		d.say("\ndemo failed: %v (adapter log: %s)", err, filepath.Join(dir, "adapter.log"))
		return err
	}
	return nil
}

func (d *demo) script(prog, dir string) error {
	c := d.c
	d.step("hpcdap dap started as a child process; initialize")
	var caps adapter.Capabilities
	if err := c.Call("initialize", map[string]any{"adapterID": "hpcdap", "clientID": "hpcdap-demo",
		"linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path", "supportsProgressReporting": true,
		"supportsVariableType": true}, &caps); err != nil {
		return err
	}
	d.say("  capabilities: %s", capabilityList(caps))

	d.step("launch %s with the local launcher, np=%d", filepath.Base(prog), d.np)
	if err := c.Call("launch", map[string]any{"program": prog, "args": []string{dir}, "np": d.np, "cwd": dir}, nil); err != nil {
		return err
	}
	for _, m := range c.Events("progressUpdate") {
		var b struct{ Message string }
		m.Decode(&b)
		d.say("  progress: %s", b.Message)
	}
	if _, err := c.WaitEvent("initialized", 30*time.Second, nil); err != nil {
		return err
	}
	d.say("  initialized: every rank is loaded and held before its first instruction")

	d.step("set a breakpoint at %s:%d (%q)", examples.RingFileName, d.bpLine, breakMarker)
	var bps dap.SetBreakpointsResponseBody
	if err := c.Call("setBreakpoints", map[string]any{"source": map[string]any{"path": d.source},
		"breakpoints": []map[string]any{{"line": d.bpLine}}}, &bps); err != nil {
		return err
	}
	for _, b := range bps.Breakpoints {
		d.say("  breakpoint %d: verified=%v at line %d", b.Id, b.Verified, b.Line)
	}
	if err := c.Call("configurationDone", nil, nil); err != nil {
		return err
	}
	d.say("  configurationDone: the ranks run")

	d.step("wait for the stop")
	ev, err := c.WaitEvent("stopped", 60*time.Second, nil)
	if err != nil {
		return err
	}
	var stopped dap.StoppedEventBody
	ev.Decode(&stopped)
	d.say("  stopped: %s (thread %d), allThreadsStopped=%v", stopped.Description, stopped.ThreadId, stopped.AllThreadsStopped)

	var ranks adapter.RanksBody
	if err := c.Call("hpcdap/ranks", map[string]any{}, &ranks); err != nil {
		return err
	}
	d.step("hpcdap/ranks: the state of every rank (focus %q)", ranks.Focus)
	for _, r := range ranks.Ranks {
		d.say("  rank %d  %-8s pid %-7d thread %-3d %s", r.Rank, r.State, r.Pid, r.ThreadID, r.StopReason)
	}

	var threads dap.ThreadsResponseBody
	if err := c.Call("threads", nil, &threads); err != nil {
		return err
	}
	d.step("threads")
	for _, t := range threads.Threads {
		d.say("  %3d  %s", t.Id, t.Name)
	}

	d.step("stackTrace of the stopped thread")
	var st dap.StackTraceResponseBody
	if err := c.Call("stackTrace", map[string]any{"threadId": stopped.ThreadId}, &st); err != nil {
		return err
	}
	for i, f := range st.StackFrames {
		loc := ""
		if f.Source != nil {
			loc = fmt.Sprintf("%s:%d", f.Source.Name, f.Line)
		}
		d.say("  #%d  %-14s %s", i, f.Name, loc)
	}
	if len(st.StackFrames) == 0 {
		return errors.New("empty stack")
	}

	d.step("scopes and variables of frame #0")
	var scopes dap.ScopesResponseBody
	if err := c.Call("scopes", map[string]any{"frameId": st.StackFrames[0].Id}, &scopes); err != nil {
		return err
	}
	for _, sc := range scopes.Scopes {
		if sc.Name != "Locals" && sc.Name != "Arguments" {
			d.say("  %s (expensive, not expanded)", sc.Name)
			continue
		}
		var vars dap.VariablesResponseBody
		if err := c.Call("variables", map[string]any{"variablesReference": sc.VariablesReference}, &vars); err != nil {
			return err
		}
		d.say("  %s:", sc.Name)
		for _, v := range vars.Variables {
			d.say("    %-8s %-12s = %s", v.Name, v.Type, shorten(v.Value, 60))
		}
	}

	d.step("hpcdap/parallelStacks: all ranks' stacks merged (outermost frame first)")
	var ps adapter.ParallelStacksBody
	if err := c.Call("hpcdap/parallelStacks", map[string]any{}, &ps); err != nil {
		return err
	}
	d.say("  %d ranks", ps.Total)
	printTree(d.out, ps.Roots, "  ")

	d.step("hpcdap/compareExpression \"local\": one variable across the ranks")
	var cmp adapter.CompareBody
	if err := c.Call("hpcdap/compareExpression", map[string]any{"expression": "local"}, &cmp); err != nil {
		return err
	}
	for _, g := range cmp.Groups {
		d.say("  ranks %-6s (%d)  local = %s", g.Ranks, g.Count, g.Value)
	}
	for _, e := range cmp.Errors {
		d.say("  ranks %-6s  error: %s", e.Ranks, e.Message)
	}

	d.step("remove the breakpoint and continue every rank to the end")
	if err := c.Call("setBreakpoints", map[string]any{"source": map[string]any{"path": d.source},
		"breakpoints": []any{}}, nil); err != nil {
		return err
	}
	if err := c.Call("continue", map[string]any{"threadId": stopped.ThreadId}, nil); err != nil {
		return err
	}
	exited, err := c.WaitEvent("exited", 60*time.Second, nil)
	if err != nil {
		return err
	}
	if _, err := c.WaitEvent("terminated", 30*time.Second, nil); err != nil {
		return err
	}
	var lines []string
	for _, o := range c.Events("output") {
		var b dap.OutputEventBody
		o.Decode(&b)
		for _, l := range strings.Split(strings.TrimRight(b.Output, "\n"), "\n") {
			lines = append(lines, fmt.Sprintf("  [%s] %s", b.Category, l))
		}
	}
	sort.SliceStable(lines, func(a, b int) bool {
		return strings.HasPrefix(lines[a], "  [stdout]") && !strings.HasPrefix(lines[b], "  [stdout]")
	})
	for _, l := range lines {
		d.say("%s", l)
	}
	var eb dap.ExitedEventBody
	exited.Decode(&eb)
	d.say("  exited: exit code %d; terminated", eb.ExitCode)

	if err := c.Call("disconnect", map[string]any{}, nil); err != nil {
		return err
	}
	d.step("disconnect: the session is over")
	return nil
}

// shorten cuts a long value for the transcript.
func shorten(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// capabilityList names the capabilities an initialize response announced.
func capabilityList(c adapter.Capabilities) string {
	b, _ := json.Marshal(c)
	var m map[string]any
	json.Unmarshal(b, &m)
	var names []string
	for k, v := range m {
		if on, ok := v.(bool); ok && on {
			names = append(names, strings.TrimPrefix(strings.TrimPrefix(k, "supports"), "support"))
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// printTree draws a parallel-stacks tree.
func printTree(w io.Writer, nodes []*adapter.StackNode, indent string) {
	for i, n := range nodes {
		branch, next := "├─ ", "│  "
		if i == len(nodes)-1 {
			branch, next = "└─ ", "   "
		}
		loc := ""
		if n.Source != nil {
			loc = fmt.Sprintf("  %s:%d", n.Source.Name, n.Line)
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "%s%s%s%s   [ranks %s]", indent, branch, n.Name, loc, n.Ranks)
		fmt.Fprintln(w, b.String())
		printTree(w, n.Children, indent+next)
	}
}
