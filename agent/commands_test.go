package agent

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// DynamicNotifyStart delivers the Control signal at the program's entry point (AT_ENTRY, the
// ELF header's e_entry), reached through an internal breakpoint that leaves no trace.
func TestDynamicNotifyStart(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "1")
	tt := h.dial(1)
	tt.attach(0, 99, "dbg")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyStart)
	n := tt.signalNotify()
	f, err := elf.Open(progBin)
	if err != nil {
		t.Fatal(err)
	}
	entry := f.Entry
	f.Close()
	if n.Signal != uint32(syscall.SIGSTOP) || n.InstAddress != entry {
		t.Fatalf("notify %+v, want SIGSTOP at the entry point %#x", n, entry)
	}
	if pc := tt.pc(0, 0); pc != entry {
		t.Errorf("pc %#x, want %#x", pc, entry)
	}
	base, text := textBytes(t, progBin)
	if got := procMem(t, h.rankPid(0), entry, 4); !bytes.Equal(got, text[entry-base:entry-base+4]) {
		t.Errorf("code at the entry point % x, want the file's % x", got, text[entry-base:entry-base+4])
	}
	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
}

// GetAuxVectors, GetProcessData and GetTargetInfo agree with /proc.
func TestProcessQueries(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "2")
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	tt.setBreak(0, testenv.NMSymbol(t, progBin, "hit"))
	tt.cont(0)
	tt.signalNotify()

	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/auxv")
	if err != nil {
		t.Fatal(err)
	}
	aux := tt.query(0, &cdti.GetAuxVectors{}).Ack.(*cdti.GetAuxVectorsAck).Words
	if len(aux) < 4 || len(aux) > cdti.MaxAuxVecDWords || len(aux)%2 != 0 || aux[len(aux)-2] != 0 {
		t.Fatalf("auxv words %v", aux)
	}
	for i, w := range aux[:len(aux)-2] {
		if want := le.Uint64(raw[8*i:]); w != want {
			t.Errorf("auxv word %d = %#x, /proc says %#x", i, w, want)
		}
	}

	pd := tt.query(0, &cdti.GetProcessData{}).Ack.(*cdti.GetProcessDataAck)
	// The oracle: /proc/PID/maps read here, line by line.
	mapsText, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	heapSeen := false
	for _, line := range strings.Split(string(mapsText), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[5] == "[heap]" {
			heapSeen = true
			var lo, hi uint64
			fmt.Sscanf(f[0], "%x-%x", &lo, &hi)
			if pd.HeapStart != lo || pd.HeapEnd != hi-1 || pd.HeapBreak != hi {
				t.Errorf("heap %#x-%#x break %#x, /proc/%d/maps says %#x-%#x", pd.HeapStart, pd.HeapEnd, pd.HeapBreak, pid, lo, hi)
			}
		}
	}
	if !heapSeen {
		t.Fatalf("no [heap] in /proc/%d/maps: the program should have one by now", pid)
	}
	if pd.TGID != uint32(pid) || pd.MmapStart == 0 || pd.MmapEnd <= pd.MmapStart {
		t.Errorf("process data %+v", pd)
	}

	ti, err := tt.c.TargetInfo(ctx(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if ti.Machine != elf.EM_X86_64 || ti.ByteOrder != elf.ELFDATA2LSB || ti.PtrSize != 8 || ti.Pid != uint32(pid) ||
		ti.Exe != progBin || ti.PageSize != uint32(os.Getpagesize()) {
		t.Errorf("target info %+v", ti)
	}

	// Preferences are stored.
	tt.mustUpdate(0, &cdti.SetPreferences{BreakpointMode: cdti.FastBreakEnable, DACMode: cdti.TrapAfterDAC})
	pr := tt.query(0, &cdti.GetPreferences{}).Ack.(*cdti.GetPreferencesAck)
	if pr.BreakpointMode != cdti.FastBreakEnable || pr.WatchpointMode != cdti.FastWatchDisable || pr.DACMode != cdti.TrapAfterDAC {
		t.Errorf("preferences %+v", pr)
	}
}

// SetMemory writes read-only text; a write over a planted breakpoint becomes the trap's
// original instruction and the trap stays.
func TestSetMemoryAndBreakpoints(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "1")
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	poke := testenv.NMSymbol(t, progBin, "poke")
	orig := tt.memory(0, poke, 4)
	tt.setBreak(0, poke+1)
	patch := []byte{0x90, 0x91, 0x92, 0x93}
	tt.mustUpdate(0, &cdti.SetMemory{Addr: poke, Data: patch})
	if got := tt.memory(0, poke, 4); !bytes.Equal(got, patch) {
		t.Errorf("GetMemory after the write: % x, want % x", got, patch)
	}
	if got := procMem(t, pid, poke, 4); !bytes.Equal(got, []byte{0x90, 0xCC, 0x92, 0x93}) {
		t.Errorf("memory after the write: % x, want the trap kept at +1", got)
	}
	// The original presented to ResetBreakpoint is now the written byte.
	if r := tt.update(0, &cdti.ResetBreakpoint{Addr: poke + 1, Instruction: uint32(orig[1])})[0]; r.Code != cdti.CmdParmErr {
		t.Errorf("ResetBreakpoint with the old original: %v, want CmdParmErr", r.Code)
	}
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: poke + 1, Instruction: 0x91})
	tt.mustUpdate(0, &cdti.SetMemory{Addr: poke, Data: orig})
	if got := procMem(t, pid, poke, 4); !bytes.Equal(got, orig) {
		t.Errorf("memory after restoring: % x, want % x", got, orig)
	}
	// Zero length succeeds; outside the process fails.
	if r := tt.update(0, &cdti.SetMemory{Addr: 8, Data: []byte{1}})[0]; r.Code != cdti.CmdParmErr {
		t.Errorf("SetMemory at 8: %v, want CmdParmErr", r.Code)
	}
	if r := tt.update(0, &cdti.SetMemory{Addr: 8})[0]; r.Code != cdti.CmdSuccess {
		t.Errorf("SetMemory of 0 bytes: %v", r.Code)
	}
}

// AllocateMemory maps memory in the process through an injected mmap; the thread's
// registers and code are as before; FreeMemory unmaps it.
func TestAllocateMemory(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "1")
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.cont(0)
	tt.signalNotify()
	before := tt.regs(0, 0)
	code := procMem(t, pid, hit, 8)

	rs := tt.update(0, &cdti.AllocateMemory{Size: 10000})
	if rs[0].Code != cdti.CmdSuccess {
		t.Fatalf("AllocateMemory: %v", rs[0].Code)
	}
	addr := rs[0].Ack.(*cdti.AllocateMemoryAck).Addr
	maps, _ := readMaps(pid)
	m, _, found := findMapping(maps, addr)
	if !found || m.start != addr || m.end-m.start != 12288 || m.perms != "rwxp" {
		t.Fatalf("allocated %#x: mapping %+v (found %v), want 12288 bytes rwxp", addr, m, found)
	}
	if after := tt.regs(0, 0); !bytes.Equal(after, before) {
		t.Errorf("registers changed by the injected call")
	}
	if got := procMem(t, pid, hit, 8); !bytes.Equal(got, code) {
		t.Errorf("code changed by the injected call: % x, was % x", got, code)
	}
	tt.mustUpdate(0, &cdti.SetMemory{Addr: addr + 100, Data: []byte("hello")})
	if got := tt.memory(0, addr+100, 5); string(got) != "hello" {
		t.Errorf("allocated memory reads %q", got)
	}
	tt.mustUpdate(0, &cdti.FreeMemory{Addr: addr, Size: 12288})
	maps, _ = readMaps(pid)
	if _, _, found := findMapping(maps, addr); found {
		t.Errorf("mapping at %#x still there after FreeMemory", addr)
	}
	if r := tt.update(0, &cdti.AllocateMemory{})[0]; r.Code != cdti.CmdParmErr {
		t.Errorf("AllocateMemory of 0 bytes: %v", r.Code)
	}
	// The program runs on unharmed.
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: hit, Instruction: uint32(origByte(t, progBin, hit))})
	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
}

// A SIGSTOP a tool sends to a process stopped at a breakpoint waits in the kernel; an
// injected call (AllocateMemory here, the scratch page of a breakpoint's first pass in the
// agent's own course) runs the thread, which takes the SIGSTOP first. That is the tool's stop:
// once the process continues it is notified, and the process is not left in a job-control
// stop that no tool hears of (a launcher stopped so as it reached MPIR_Breakpoint held an
// attach until its time ran out).
func TestSIGSTOPDuringInjectedCall(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "1")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	tt.setBreak(0, hit)
	tt.cont(0)
	tt.signalNotify()
	tt.mustUpdate(0, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGSTOP)})
	rs := tt.update(0, &cdti.AllocateMemory{Size: 4096})
	if rs[0].Code != cdti.CmdSuccess {
		t.Fatalf("AllocateMemory: %v", rs[0].Code)
	}
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: hit, Instruction: uint32(origByte(t, progBin, hit))})
	tt.cont(0)
	if n := tt.signalNotify(); n.Signal != uint32(syscall.SIGSTOP) {
		t.Fatalf("after the continue: %+v, want the SIGSTOP", n)
	}
	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
}

// The file commands serve the staging directory and nothing outside it.
func TestFileCommands(t *testing.T) {
	staging := t.TempDir()
	os.WriteFile(filepath.Join(staging, "a.txt"), []byte("0123456789"), 0o644)
	os.MkdirAll(filepath.Join(staging, "sub"), 0o755)
	os.WriteFile(filepath.Join(staging, "sub", "b.bin"), bytes.Repeat([]byte{7}, 70000), 0o644)
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("secret"), 0o644)
	os.Symlink(outside, filepath.Join(staging, "escape"))
	os.Symlink("a.txt", filepath.Join(staging, "inside"))

	h := newHarness(t, staging)
	h.spawn(1, progBin, "loop", "1")
	tt := h.dial(1)
	tt.attach(0, 0, "files") // a query-only tool

	names := tt.query(0, &cdti.GetFilenames{}).Ack.(*cdti.GetFilenamesAck).Names
	if len(names) != 2 || names[0] != "a.txt" || names[1] != "sub/b.bin" {
		t.Errorf("file names %q", names)
	}
	r := tt.query(0, &cdti.GetFileStatData{Pathname: "sub/b.bin"})
	if r.Code != cdti.CmdSuccess || r.Ack.(*cdti.GetFileStatDataAck).Stat.Size != 70000 {
		t.Errorf("stat sub/b.bin: %v %+v", r.Code, r.Ack)
	}
	r = tt.query(0, &cdti.GetFileContents{Pathname: filepath.Join(staging, "a.txt"), Offset: 3, NumBytes: 4})
	if r.Code != cdti.CmdSuccess || string(r.Ack.(*cdti.GetFileContentsAck).Data) != "3456" {
		t.Errorf("contents of a.txt: %v %+v", r.Code, r.Ack)
	}
	r = tt.query(0, &cdti.GetFileContents{Pathname: "inside", Offset: 8, NumBytes: 100})
	if r.Code != cdti.CmdSuccess || string(r.Ack.(*cdti.GetFileContentsAck).Data) != "89" {
		t.Errorf("contents through an inside link: %v %+v", r.Code, r.Ack)
	}
	for _, c := range []struct {
		name string
		want cdti.CmdReturnCode
	}{
		{"../secret", cdti.CmdParmErr},
		{"sub/../../x", cdti.CmdParmErr},
		{outside, cdti.CmdParmErr},
		{"/etc/passwd", cdti.CmdParmErr},
		{"escape", cdti.CmdParmErr},
		{"nosuch", cdti.CmdFileNotFound},
	} {
		if r := tt.query(0, &cdti.GetFileStatData{Pathname: c.name}); r.Code != c.want {
			t.Errorf("stat %q: %v, want %v", c.name, r.Code, c.want)
		}
		if r := tt.query(0, &cdti.GetFileContents{Pathname: c.name, NumBytes: 1}); r.Code != c.want {
			t.Errorf("contents of %q: %v, want %v", c.name, r.Code, c.want)
		}
	}
	rs := rawQuery(t, tt, 0, &cdti.GetFileContents{Pathname: "a.txt", NumBytes: cdti.MaxMemorySize + 1})
	if rs[0].Code != cdti.CmdLngthErr {
		t.Errorf("contents of %d bytes: %v, want CmdLngthErr", cdti.MaxMemorySize+1, rs[0].Code)
	}
}
