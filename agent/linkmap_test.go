package agent

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/procimage"
)

// toolMemory reads a rank's memory with GetMemory, as the front end reads a link map without
// GetLinkMap.
type toolMemory struct{ tt *testTool }

func (m toolMemory) ReadAt(p []byte, addr uint64) (int, error) {
	b, err := m.tt.c.ReadMemory(ctx(), 0, 0, addr, len(p), cdti.SpecAccessUseThreadState)
	n := copy(p, b)
	if err == nil && n < len(p) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// TestGetLinkMap runs a program linked with libm that loads libz with dlopen (testdata/libs.c,
// a PIE). At its first instruction r_debug is not set up: CmdAddrErr. Stopped once libz is
// loaded, GetLinkMap (sent with GetAuxVectors, as the front end does) answers the link map the
// front end reads word by word through GetMemory, every file in it at the address where
// /proc/PID/maps maps it and every shared object mapped there in it; r_debug given, or the
// dynamic section, the answer is the same. Too small a bound, a bad r_debug and a looping list
// are error codes, and the program then runs to its end as if nothing had been asked.
func TestGetLinkMap(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "libs")
	if out, err := exec.Command("gcc", "-g", "-O0", "-fno-omit-frame-pointer", "-o", exe, "testdata/libs.c", "-lm").CombinedOutput(); err != nil {
		t.Fatalf("gcc libs.c: %v\n%s", err, out)
	}
	h := newHarness(t, "")
	out := h.spawn(1, exe)
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	if r := tt.query(0, &cdti.GetLinkMap{}); r.Code != cdti.CmdAddrErr {
		t.Errorf("GetLinkMap before the dynamic linker ran: %v, want CmdAddrErr", r.Code)
	}

	rs, err := tt.c.Query(ctx(), 0, &cdti.GetAuxVectors{}, &cdti.GetLinkMap{MaxLength: cdti.MaxLinkMapSize})
	if err != nil || rs[0].Code != cdti.CmdSuccess {
		t.Fatalf("GetAuxVectors: %v %v", err, rs)
	}
	aux := procimage.AuxvFromWords(rs[0].Ack.(*cdti.GetAuxVectorsAck).Words)
	bias := aux.Entry() - testenv.ELFEntry(t, exe)
	loaded := bias + testenv.NMSymbol(t, exe, "loaded")
	tt.setBreak(0, loaded)
	tt.cont(0)
	if n := tt.signalNotify(); n.InstAddress != loaded {
		t.Fatalf("stopped at %#x, want loaded() at %#x", n.InstAddress, loaded)
	}

	rs, err = tt.c.Query(ctx(), 0, &cdti.GetAuxVectors{}, &cdti.GetLinkMap{MaxLength: cdti.MaxLinkMapSize})
	if err != nil || rs[1].Code != cdti.CmdSuccess {
		t.Fatalf("GetLinkMap: %v %v", err, rs)
	}
	lm := rs[1].Ack.(*cdti.GetLinkMapAck)

	// The link map read word by word through GetMemory, with the same reader.
	im := procimage.Image{Mem: toolMemory{tt}, Layout: procimage.Layout{Order: binary.LittleEndian, PtrSize: 8}}
	ex, err := im.Executable(aux)
	if err != nil {
		t.Fatal(err)
	}
	rdebug, err := im.DebugAddr(ex.Dynamic, min(ex.DynamicSize, 8192))
	if err != nil {
		t.Fatal(err)
	}
	rd, err := im.RDebug(rdebug)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := im.LinkObjects(rd.Map, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lm.RDebug != rdebug || lm.Brk != rd.Brk || lm.State != uint32(procimage.RTConsistent) || len(lm.Entries) != len(objs) {
		t.Fatalf("GetLinkMapAck r_debug %#x r_brk %#x state %d, %d entries; read through GetMemory: %#x %#x %d, %d entries",
			lm.RDebug, lm.Brk, lm.State, len(lm.Entries), rdebug, rd.Brk, rd.State, len(objs))
	}
	for i, o := range objs {
		if want := (cdti.LinkMapEntry{Bias: o.Addr, Node: o.Node, Name: o.Path}); lm.Entries[i] != want {
			t.Errorf("entry %d: %+v, read through GetMemory %+v", i, lm.Entries[i], want)
		}
	}
	if lm.Entries[0].Name != "" || lm.Entries[0].Bias != bias || bias == 0 {
		t.Errorf("first entry %+v, want the executable at its bias %#x", lm.Entries[0], bias)
	}

	// /proc/PID/maps: each named file at its bias, each shared object mapped named.
	starts, err := testenv.ProcMapStarts(pid)
	if err != nil {
		t.Fatal(err)
	}
	if starts[exe] != bias {
		t.Errorf("/proc/%d/maps maps %s at %#x, the link map says %#x", pid, exe, starts[exe], bias)
	}
	listed := map[string]bool{}
	for _, e := range lm.Entries[1:] {
		real, err := filepath.EvalSymlinks(e.Name)
		if err != nil {
			continue // the vdso
		}
		listed[real] = true
		if at, ok := starts[real]; !ok || at != e.Bias {
			t.Errorf("%s: bias %#x; /proc/%d/maps maps it at %#x (found %v)", e.Name, e.Bias, pid, at, ok)
		}
	}
	so := regexp.MustCompile(`\.so(\.[0-9.]+)?$`)
	var names []string
	for path := range starts {
		if real, err := filepath.EvalSymlinks(path); err == nil && so.MatchString(path) {
			names = append(names, filepath.Base(path))
			if !listed[real] {
				t.Errorf("/proc/%d/maps maps %s, the link map does not list it", pid, path)
			}
		}
	}
	for _, lib := range []string{"libm.so.6", "libz.so.1", "libc.so.6"} {
		if !strings.Contains(strings.Join(names, " "), lib) {
			t.Errorf("%s not among the shared objects mapped: %v", lib, names)
		}
	}

	// The same answer from r_debug, and from the dynamic section.
	for _, c := range []*cdti.GetLinkMap{{RDebug: rdebug, MaxLength: cdti.MaxLinkMapSize},
		{Dynamic: ex.Dynamic, DynamicSize: uint32(ex.DynamicSize), MaxLength: cdti.MaxLinkMapSize}} {
		r := tt.query(0, c)
		if a, ok := r.Ack.(*cdti.GetLinkMapAck); r.Code != cdti.CmdSuccess || !ok || len(a.Entries) != len(lm.Entries) ||
			a.Entries[len(a.Entries)-1] != lm.Entries[len(lm.Entries)-1] || a.RDebug != rdebug {
			t.Errorf("GetLinkMap %+v: %v %+v", c, r.Code, r.Ack)
		}
	}

	// Errors: an answer over its bound, r_debug where nothing is mapped, a list that loops.
	if r := tt.query(0, &cdti.GetLinkMap{MaxLength: 64}); r.Code != cdti.CmdLngthErr {
		t.Errorf("GetLinkMap of at most 64 bytes: %v, want CmdLngthErr", r.Code)
	}
	if r := tt.query(0, &cdti.GetLinkMap{RDebug: 8}); r.Code != cdti.CmdParmErr {
		t.Errorf("GetLinkMap with r_debug at 8: %v, want CmdParmErr", r.Code)
	}
	last := objs[len(objs)-1].Node + 3*8 // its l_next
	word := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	tt.mustUpdate(0, &cdti.SetMemory{Addr: last, Data: word(objs[0].Node)})
	if r := tt.query(0, &cdti.GetLinkMap{}); r.Code != cdti.CmdParmErr {
		t.Errorf("GetLinkMap of a looping list: %v, want CmdParmErr", r.Code)
	}
	tt.mustUpdate(0, &cdti.SetMemory{Addr: last, Data: word(0)})

	orig := testenv.ELFBytes(t, exe, loaded-bias, 1)[0]
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: loaded, Instruction: uint32(orig)})
	tt.cont(0)
	if st := tt.waitTermination(0); !st.Exited() || st.ExitCode() != 0 {
		t.Errorf("exit %+v, want 0", st)
	}
	out.waitFor(t, "done 2.5403") // cos(1) + loaded + reloaded
}

// TestGetModuleMemory: stopped in testdata/libs.c (a PIE, libm linked, libz opened), a
// GetModuleMemory of each module of the link map ("" the executable) reads what GetMemory reads
// at the module's bias plus the offset (its ELF header at offset 0) and says that address; a
// module not loaded, and an offset where nothing is mapped, fail with CmdParmErr. Stopped
// again once libz is closed and liblzma opened (what the first stop learned of the link map
// must not answer for the second), libz fails and liblzma is read where the link map now puts
// it.
func TestGetModuleMemory(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "libs")
	if out, err := exec.Command("gcc", "-g", "-O0", "-o", exe, "testdata/libs.c", "-lm").CombinedOutput(); err != nil {
		t.Fatalf("gcc libs.c: %v\n%s", err, out)
	}
	h := newHarness(t, "")
	h.spawn(1, exe)
	tt, _ := startStopped(t, h, 1)
	rs, err := tt.c.Query(ctx(), 0, &cdti.GetAuxVectors{})
	if err != nil || rs[0].Code != cdti.CmdSuccess {
		t.Fatalf("GetAuxVectors: %v %v", err, rs)
	}
	aux := procimage.AuxvFromWords(rs[0].Ack.(*cdti.GetAuxVectorsAck).Words)
	bias := aux.Entry() - testenv.ELFEntry(t, exe)
	stopIn := func(fn string) map[string]uint64 {
		t.Helper()
		at := bias + testenv.NMSymbol(t, exe, fn)
		tt.setBreak(0, at)
		tt.cont(0)
		if n := tt.signalNotify(); n.InstAddress != at {
			t.Fatalf("stopped at %#x, want %s() at %#x", n.InstAddress, fn, at)
		}
		r := tt.query(0, &cdti.GetLinkMap{MaxLength: cdti.MaxLinkMapSize})
		lm, _ := r.Ack.(*cdti.GetLinkMapAck)
		if r.Code != cdti.CmdSuccess || lm == nil {
			t.Fatalf("GetLinkMap: %v", r.Code)
		}
		out := map[string]uint64{}
		for _, e := range lm.Entries {
			if _, err := os.Stat(e.Name); e.Name == "" || err == nil { // not the vdso, named by no file
				out[e.Name] = e.Bias
			}
		}
		return out
	}
	readAll := func(mods map[string]uint64) {
		t.Helper()
		for name, at := range mods {
			for _, off := range []uint64{0, 0x40} {
				r := tt.query(0, &cdti.GetModuleMemory{Module: name, Offset: off, Length: 64, SpecAccess: cdti.SpecAccessUseThreadState})
				a, _ := r.Ack.(*cdti.GetModuleMemoryAck)
				want, err := tt.c.ReadMemory(ctx(), 0, 0, at+off, 64, cdti.SpecAccessUseThreadState)
				switch {
				case err != nil:
					t.Fatalf("GetMemory of %q at %#x: %v", name, at+off, err)
				case r.Code != cdti.CmdSuccess || a == nil:
					t.Errorf("GetModuleMemory of %q at +%#x: %v", name, off, r.Code)
				case a.Addr != at+off || !bytes.Equal(a.Data, want):
					t.Errorf("GetModuleMemory of %q at +%#x: %#x % x, GetMemory at %#x: % x", name, off, a.Addr, a.Data, at+off, want)
				case off == 0 && string(a.Data[:4]) != "\x7fELF":
					t.Errorf("%q at its bias: % x, not an ELF header", name, a.Data[:4])
				}
			}
		}
	}
	fails := func(c *cdti.GetModuleMemory) {
		t.Helper()
		if r := tt.query(0, c); r.Code != cdti.CmdParmErr {
			t.Errorf("GetModuleMemory of %q at +%#x: %v, want CmdParmErr", c.Module, c.Offset, r.Code)
		}
	}
	named := func(mods map[string]uint64, lib string) string {
		t.Helper()
		for name := range mods {
			if strings.Contains(name, lib) {
				return name
			}
		}
		t.Fatalf("%s not in the link map: %v", lib, mods)
		return ""
	}

	first := stopIn("loaded")
	libz := named(first, "libz.so")
	if len(first) < 4 { // the executable, libm, libz, libc (and ld.so)
		t.Errorf("link map of %d files: %v", len(first), first)
	}
	readAll(first)
	fails(&cdti.GetModuleMemory{Module: "/no/such.so", Length: 8})
	fails(&cdti.GetModuleMemory{Module: "", Offset: 1 << 46, Length: 8})

	second := stopIn("reloaded")
	if _, still := second[libz]; still {
		t.Fatalf("%s still in the link map after dlclose: %v", libz, second)
	}
	named(second, "liblzma.so")
	readAll(second)
	fails(&cdti.GetModuleMemory{Module: libz, Length: 8})
}

// TestModuleMemoryAfterExec: a program whose link map was walked (r_debug's address kept for
// its image) execs itself; in the new image, whose dynamic linker and libraries are loaded
// elsewhere (address-space randomisation), GetModuleMemory reads libc where /proc/PID/maps
// now maps it: nothing of the old image's walk answers for the new one.
func TestModuleMemoryAfterExec(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "exec")
	tt, _ := startStopped(t, h, 1)
	pid := h.rankPid(0)
	libcAt := func() (name string, bias uint64) {
		t.Helper()
		r := tt.query(0, &cdti.GetLinkMap{MaxLength: cdti.MaxLinkMapSize})
		lm, _ := r.Ack.(*cdti.GetLinkMapAck)
		if r.Code != cdti.CmdSuccess || lm == nil {
			t.Fatalf("GetLinkMap: %v", r.Code)
		}
		for _, e := range lm.Entries {
			if strings.Contains(e.Name, "libc.so") {
				name = e.Name
				bias = e.Bias
			}
		}
		starts, err := testenv.ProcMapStarts(pid)
		if err != nil {
			t.Fatal(err)
		}
		real, _ := filepath.EvalSymlinks(name)
		if name == "" || starts[real] != bias {
			t.Fatalf("libc %q at %#x in the link map, /proc/%d/maps %#x", name, bias, pid, starts[real])
		}
		r = tt.query(0, &cdti.GetModuleMemory{Module: name, Length: 16, SpecAccess: cdti.SpecAccessUseThreadState})
		if a, _ := r.Ack.(*cdti.GetModuleMemoryAck); r.Code != cdti.CmdSuccess || a == nil || a.Addr != bias || string(a.Data[:4]) != "\x7fELF" {
			t.Fatalf("GetModuleMemory of %q: %v %+v, want the ELF header at %#x", name, r.Code, r.Ack, bias)
		}
		return name, bias
	}
	main := testenv.NMSymbol(t, progBin, "main")
	tt.setBreak(0, main)
	tt.cont(0)
	if n := tt.signalNotify(); n.InstAddress != main {
		t.Fatalf("stopped at %#x, want main at %#x", n.InstAddress, main)
	}
	_, before := libcAt()
	tt.cont(0) // on to the exec, which takes the breakpoint with the old image
	if n := tt.signalNotify(); n.Signal != uint32(syscall.SIGTRAP) || n.Reason != cdti.SignalGeneric {
		t.Fatalf("exec notify %+v, want SIGTRAP Generic", n)
	}
	tt.setBreak(0, main)
	tt.cont(0)
	if n := tt.signalNotify(); n.InstAddress != main {
		t.Fatalf("stopped at %#x, want the new image's main at %#x", n.InstAddress, main)
	}
	if _, after := libcAt(); after == before {
		t.Logf("libc at %#x in both images: the layouts are not randomised here", after)
	}
}
