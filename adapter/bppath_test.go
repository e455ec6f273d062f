package adapter

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// procMem reads n bytes at addr of process pid from /proc, the kernel's view of its memory
// (traps included).
func procMem(t *testing.T, pid int, addr uint64, n int) []byte {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, int64(addr)); err != nil {
		t.Fatalf("read %#x of pid %d: %v", addr, pid, err)
	}
	return buf
}

// loadBias is the load bias of bin in the job, from the modules request.
func loadBias(t *testing.T, d *dapSession, bin string) uint64 {
	t.Helper()
	var mods dap.ModulesResponseBody
	d.call("modules", map[string]any{}, &mods)
	for _, m := range mods.Modules {
		if m.Path == bin {
			lo, _, _ := strings.Cut(m.AddressRange, "-")
			if b, err := strconv.ParseUint(lo, 0, 64); err == nil {
				return b
			}
		}
	}
	t.Fatalf("no module for %s in %+v", bin, mods.Modules)
	return 0
}

// stopInLeaf launches stacks, stops at leaf through a function breakpoint and returns the
// thread, the pc (the breakpoint's address) and the rank's pid.
func stopInLeaf(t *testing.T, d *dapSession, p *program) (tid int, pc uint64, pid int) {
	t.Helper()
	d.launch(map[string]any{"program": p.bin})
	var fb SetBreakpointsResponseBodyExt
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "leaf"}}}, &fb)
	if len(fb.Breakpoints) != 1 || !fb.Breakpoints[0].Verified {
		t.Fatalf("function breakpoint: %+v", fb)
	}
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	pc, err := strconv.ParseUint(d.stackTrace(st.ThreadId)[0].InstructionPointerReference, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	return st.ThreadId, pc, d.ranks().Ranks[0].Pid
}

// TestBreakpointsShareAddress plants a function and an instruction breakpoint at the same
// address and removes them one at a time, in both orders: the trap stays while one of them is
// left, and the original instruction (the ELF file's bytes) is back once both are gone.
func TestBreakpointsShareAddress(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	_, pc, pid := stopInLeaf(t, d, p)
	orig := testenv.ELFBytes(t, p.bin, pc-loadBias(t, d, p.bin), 1)
	if orig[0] == 0xCC {
		t.Fatalf("the file has a trap at %#x", pc)
	}
	ref := fmt.Sprintf("%#x", pc)
	setFunc := func(names ...string) {
		bps := []map[string]any{}
		for _, n := range names {
			bps = append(bps, map[string]any{"name": n})
		}
		d.call("setFunctionBreakpoints", map[string]any{"breakpoints": bps}, nil)
	}
	setInstr := func(refs ...string) {
		bps := []map[string]any{}
		for _, r := range refs {
			bps = append(bps, map[string]any{"instructionReference": r})
		}
		var ib SetBreakpointsResponseBodyExt
		d.call("setInstructionBreakpoints", map[string]any{"breakpoints": bps}, &ib)
		for _, b := range ib.Breakpoints {
			if !b.Verified {
				t.Fatalf("instruction breakpoint: %+v", ib)
			}
		}
	}
	want := func(step string, b byte) {
		t.Helper()
		if got := procMem(t, pid, pc, 1)[0]; got != b {
			t.Errorf("%s: byte at %#x is %#x, want %#x", step, pc, got, b)
		}
	}
	setInstr(ref)
	want("function and instruction breakpoint", 0xCC)
	setFunc()
	want("instruction breakpoint left", 0xCC)
	setInstr()
	want("both removed", orig[0])

	setFunc("leaf")
	setInstr(ref)
	want("both set again", 0xCC)
	setInstr()
	want("function breakpoint left", 0xCC)
	setFunc()
	want("both removed again", orig[0])
}

// TestBreakpointOverWrittenCode writes new code over a planted instruction breakpoint and then
// removes the breakpoint: the agent, which owns what lies under the trap, puts back what was
// written, not what the file had.
func TestBreakpointOverWrittenCode(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	_, pc, pid := stopInLeaf(t, d, p)
	var dis struct {
		Instructions []DisassembledInstruction `json:"instructions"`
	}
	d.call("disassemble", map[string]any{"memoryReference": fmt.Sprintf("%#x", pc), "instructionCount": 4}, &dis)
	if len(dis.Instructions) != 4 {
		t.Fatalf("%d instructions", len(dis.Instructions))
	}
	target, err := strconv.ParseUint(dis.Instructions[2].Address, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []any{}}, nil)
	var ib SetBreakpointsResponseBodyExt
	d.call("setInstructionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"instructionReference": dis.Instructions[2].Address}}}, &ib)
	if len(ib.Breakpoints) != 1 || !ib.Breakpoints[0].Verified {
		t.Fatalf("instruction breakpoint: %+v", ib)
	}
	if got := procMem(t, pid, target, 1)[0]; got != 0xCC {
		t.Fatalf("no trap at %#x: %#x", target, got)
	}
	file := testenv.ELFBytes(t, p.bin, target-loadBias(t, d, p.bin), 1)[0]
	written := file ^ 0xFF
	d.call("writeMemory", map[string]any{"memoryReference": dis.Instructions[2].Address,
		"data": base64.StdEncoding.EncodeToString([]byte{written})}, nil)
	if got := procMem(t, pid, target, 1)[0]; got != 0xCC {
		t.Errorf("the write took the trap at %#x away: %#x", target, got)
	}
	d.call("setInstructionBreakpoints", map[string]any{"breakpoints": []any{}}, nil)
	if got := procMem(t, pid, target, 1)[0]; got != written {
		t.Errorf("after the breakpoint went, %#x holds %#x; written %#x (the file has %#x)", target, got, written, file)
	}
}

// TestBreakpointResponseCommands: each set-breakpoints request is answered by a response that
// names its own command.
func TestBreakpointResponseCommands(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	tid, pc, _ := stopInLeaf(t, d, p)
	frames := d.stackTrace(tid)
	var info dap.DataBreakpointInfoResponseBody
	d.call("dataBreakpointInfo", map[string]any{"name": "counter", "frameId": frames[0].Id}, &info)
	for _, c := range []struct {
		command string
		args    any
	}{
		{"setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
			"breakpoints": []map[string]any{{"line": p.line(t, "leaf-return")}}}},
		{"setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "middle"}}}},
		{"setInstructionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"instructionReference": fmt.Sprintf("%#x", pc)}}}},
		{"setDataBreakpoints", map[string]any{"breakpoints": []map[string]any{{"dataId": info.DataId, "accessType": "write"}}}},
	} {
		m, err := d.c.Request(c.command, c.args)
		if err != nil {
			t.Fatal(err)
		}
		var body SetBreakpointsResponseBodyExt
		if err := m.Decode(&body); err != nil {
			t.Fatal(err)
		}
		if !m.Success || m.Command != c.command || len(body.Breakpoints) != 1 || !body.Breakpoints[0].Verified {
			t.Errorf("%s: answered %q (success %v): %s", c.command, m.Command, m.Success, m.Body)
		}
	}
}

// TestBreakpointRulesCoreFile: in a core file no kind of breakpoint can stop; each is answered
// unverified with the reason, and a bad hit condition fails the request whatever its kind.
func TestBreakpointRulesCoreFile(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	core := filepath.Join(t.TempDir(), "stacks.core")
	gdbOracle(t, p, []string{"HPCDAP_RANK=0"}, []string{"segv"}, "run", "oracle-dump", "generate-core-file "+core, "kill")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "coreFile": core})
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	pc := d.stackTrace(st.ThreadId)[0].InstructionPointerReference
	requests := map[string]map[string]any{
		"setBreakpoints": {"source": map[string]any{"path": p.src},
			"breakpoints": []map[string]any{{"line": p.line(t, "leaf-return")}}},
		"setFunctionBreakpoints":    {"breakpoints": []map[string]any{{"name": "leaf"}}},
		"setInstructionBreakpoints": {"breakpoints": []map[string]any{{"instructionReference": pc}}},
		"setDataBreakpoints":        {"breakpoints": []map[string]any{{"dataId": "a:0:1000:4:x", "accessType": "write"}}},
	}
	for command, args := range requests {
		var body SetBreakpointsResponseBodyExt
		d.call(command, args, &body)
		if len(body.Breakpoints) != 1 || body.Breakpoints[0].Verified || body.Breakpoints[0].Reason != "failed" ||
			!strings.Contains(body.Breakpoints[0].Message, "core file") {
			t.Errorf("%s in a core file: %+v", command, body.Breakpoints)
		}
		bad := map[string]any{}
		for k, v := range args {
			bad[k] = v
		}
		list := []map[string]any{}
		for _, b := range args["breakpoints"].([]map[string]any) {
			c := map[string]any{"hitCondition": "often"}
			for k, v := range b {
				c[k] = v
			}
			list = append(list, c)
		}
		bad["breakpoints"] = list
		if msg := d.callErr(command, bad); !strings.Contains(msg, command) || !strings.Contains(msg, "hit condition") {
			t.Errorf("%s with a bad hit condition: %q", command, msg)
		}
	}
}

// TestBreakpointRulesNoDebug: a job run without debugging plants nothing, whatever the kind of
// breakpoint.
func TestBreakpointRulesNoDebug(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "noDebug": true})
	for command, args := range map[string]map[string]any{
		"setBreakpoints": {"source": map[string]any{"path": p.src},
			"breakpoints": []map[string]any{{"line": p.line(t, "leaf-return")}}},
		"setFunctionBreakpoints":    {"breakpoints": []map[string]any{{"name": "leaf"}}},
		"setInstructionBreakpoints": {"breakpoints": []map[string]any{{"instructionReference": "0x1000"}}},
	} {
		var body SetBreakpointsResponseBodyExt
		d.call(command, args, &body)
		if len(body.Breakpoints) != 1 || body.Breakpoints[0].Verified || body.Breakpoints[0].Reason != "failed" ||
			!strings.Contains(body.Breakpoints[0].Message, "noDebug") {
			t.Errorf("%s without debugging: %+v", command, body.Breakpoints)
		}
	}
}

// TestBreakpointsOnEveryRankOfNode plants a function and an instruction breakpoint at one
// address in the four ranks of a node, removes them, and checks each rank's memory: the trap
// is in every rank while a breakpoint wants it, and the file's instruction is back in every
// rank after.
func TestBreakpointsOnEveryRankOfNode(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	d.launch(map[string]any{"program": p.bin, "np": 4})
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"name": "leaf"}}}, nil)
	d.call("configurationDone", nil, nil)
	st := d.stopped()
	ref := d.stackTrace(st.ThreadId)[0].InstructionPointerReference
	pc, _ := strconv.ParseUint(ref, 0, 64)
	orig := testenv.ELFBytes(t, p.bin, pc-loadBias(t, d, p.bin), 1)[0]
	ranks := d.ranks().Ranks
	if len(ranks) != 4 {
		t.Fatalf("ranks: %+v", ranks)
	}
	want := func(step string, b byte) {
		t.Helper()
		for _, r := range ranks {
			if got := procMem(t, r.Pid, pc, 1)[0]; got != b {
				t.Errorf("%s: rank %d: byte at %#x is %#x, want %#x", step, r.Rank, pc, got, b)
			}
		}
	}
	want("function breakpoint", 0xCC)
	var ib SetBreakpointsResponseBodyExt
	d.call("setInstructionBreakpoints", map[string]any{"breakpoints": []map[string]any{{"instructionReference": ref}}}, &ib)
	if len(ib.Breakpoints) != 1 || !ib.Breakpoints[0].Verified {
		t.Fatalf("instruction breakpoint: %+v", ib)
	}
	d.call("setFunctionBreakpoints", map[string]any{"breakpoints": []any{}}, nil)
	want("instruction breakpoint left", 0xCC)
	d.call("setInstructionBreakpoints", map[string]any{"breakpoints": []any{}}, nil)
	want("both removed", orig)
}
