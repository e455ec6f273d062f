package adapter

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/adapter/dapclient"
)

// lldbVSCode is the peer adapter the side-by-side tests compare against (Debian's lldb-15).
const lldbVSCode = "lldb-vscode-15"

// peer is a DAP session with another adapter, stopped at a breakpoint.
type peer struct {
	c      *dapclient.Client
	cmd    *exec.Cmd
	thread int
}

// startLLDB runs program under lldb-vscode and stops it at file:line.
func startLLDB(t testing.TB, p *program, line int, env []string) *peer {
	t.Helper()
	needTool(t, lldbVSCode)
	cmd := exec.Command(lldbVSCode)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := dapclient.New(out, in)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", lldbVSCode, err)
		}
	}
	must(c.Call("initialize", map[string]any{"adapterID": "lldb", "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path"}, nil))
	_, launched, err := c.Send("launch", map[string]any{"program": p.bin, "env": env, "cwd": p.dir})
	must(err)
	_, err = c.WaitEvent("initialized", 30*time.Second, nil)
	must(err)
	must(c.Call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
		"breakpoints": []map[string]any{{"line": line}}}, nil))
	must(c.Call("configurationDone", nil, nil))
	if m := <-launched; m == nil || !m.Success {
		t.Fatalf("%s: launch failed: %+v", lldbVSCode, m)
	}
	ev, err := c.WaitEvent("stopped", 30*time.Second, nil)
	must(err)
	var st dap.StoppedEventBody
	ev.Decode(&st)
	return &peer{c: c, cmd: cmd, thread: st.ThreadId}
}

// untilMain keeps the frames up to and including main (lldb goes on into libc's start code).
func untilMain(fs []dap.StackFrame) []dap.StackFrame {
	for i, f := range fs {
		if f.Name == "main" {
			return fs[:i+1]
		}
	}
	return fs
}

// lldbVars returns lldb's locals of a frame (lldb lists arguments among them).
func lldbVars(t testing.TB, c *dapclient.Client, frameID int) map[string]dap.Variable {
	t.Helper()
	var sc dap.ScopesResponseBody
	if err := c.Call("scopes", map[string]any{"frameId": frameID}, &sc); err != nil {
		t.Fatal(err)
	}
	out := map[string]dap.Variable{}
	for _, s := range sc.Scopes {
		if s.Name != "Locals" {
			continue
		}
		var vb dap.VariablesResponseBody
		if err := c.Call("variables", map[string]any{"variablesReference": s.VariablesReference}, &vb); err != nil {
			t.Fatal(err)
		}
		for _, v := range vb.Variables {
			out[v.Name] = v
		}
	}
	return out
}

// TestSideBySideWithLLDB runs the same program and breakpoint under hpcdap and lldb-vscode:
// frames, lines, local variables and their integer values must agree.
func TestSideBySideWithLLDB(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	for _, mark := range []string{"leaf-write", "middle-after", "main-print"} {
		line := p.line(t, mark)
		lp := startLLDB(t, p, line, []string{"HPCDAP_RANK=0"})
		var lst dap.StackTraceResponseBody
		if err := lp.c.Call("stackTrace", map[string]any{"threadId": lp.thread}, &lst); err != nil {
			t.Fatal(err)
		}
		lframes := untilMain(lst.StackFrames)
		d := newDAP(t, viaPipe)
		d.launch(map[string]any{"program": p.bin})
		d.setBreakpoints(p.src, line)
		d.call("configurationDone", nil, nil)
		st := d.stopped()
		frames := d.stackTrace(st.ThreadId)
		if len(frames) != len(lframes) {
			t.Errorf("%s: hpcdap %s, lldb %s", mark, frameList(frames), frameList(lframes))
		} else {
			for i := range frames {
				if frames[i].Name != lframes[i].Name || frames[i].Line != lframes[i].Line ||
					frames[i].Source.Path != lframes[i].Source.Path {
					t.Errorf("%s frame %d: hpcdap %s:%d, lldb %s:%d", mark, i, frames[i].Name, frames[i].Line,
						lframes[i].Name, lframes[i].Line)
				}
			}
		}
		for i := range min(len(frames), len(lframes)) {
			mine := d.scopeVars(frames[i].Id, "Locals")
			for k, v := range d.scopeVars(frames[i].Id, "Arguments") {
				mine[k] = v
			}
			theirs := lldbVars(t, lp.c, lframes[i].Id)
			if len(mine) != len(theirs) {
				t.Errorf("%s frame %d: hpcdap variables %v, lldb %v", mark, i, keys(mine), keys(theirs))
			}
			for name, lv := range theirs {
				hv, ok := mine[name]
				if !ok {
					t.Errorf("%s frame %d: lldb has %s, hpcdap does not", mark, i, name)
					continue
				}
				if lv.Type == "int" || lv.Type == "double" {
					if _, err := strconv.ParseFloat(lv.Value, 64); err == nil && hv.Value != lv.Value {
						t.Errorf("%s frame %d: %s = %s, lldb %s", mark, i, name, hv.Value, lv.Value)
					}
				}
				if strings.TrimPrefix(hv.Type, "struct ") != strings.TrimPrefix(strings.ReplaceAll(lv.Type, "shape *", "struct shape *"), "struct ") {
					t.Errorf("%s frame %d: %s has type %q, lldb %q", mark, i, name, hv.Type, lv.Type)
				}
			}
		}
		d.close()
		lp.c.Call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
	}
}
