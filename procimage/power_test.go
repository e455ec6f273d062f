package procimage_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/procimage"
	tgt "github.com/hpcdap/hpcdap/target"
	"github.com/hpcdap/hpcdap/target/rsp"
)

// rspMemory reads a QEMU guest through its GDB stub.
type rspMemory struct{ p *rsp.Process }

func (m rspMemory) ReadAt(b []byte, addr uint64) (int, error) { return m.p.ReadMemory(addr, b) }

// TestPowerBigEndianUnderQEMU runs a dynamically linked big-endian ppc64 (ELFv1) program
// under QEMU user mode, stops it through the GDB stub once it has recorded what it sees of
// itself (getauxval, dl_iterate_phdr: testdata/selfaux.c), and reads its auxv (qXfer:auxv)
// and link map (memory packets) with this package: every value must match the record.
func TestPowerBigEndianUnderQEMU(t *testing.T) {
	const gcc, sysroot = "powerpc64-linux-gnu-gcc", "/usr/powerpc64-linux-gnu"
	testenv.NeedTool(t, gcc, "gcc-powerpc64-linux-gnu")
	emu := testenv.QEMUUser(t, "qemu-ppc64")
	dir := t.TempDir()
	exe, rec := filepath.Join(dir, "selfaux"), filepath.Join(dir, "record")
	src, _ := filepath.Abs("testdata/selfaux.c")
	if out, err := execOut(gcc, "-g", "-O0", "-no-pie", "-o", exe, src); err != nil {
		t.Fatalf("%s: %v\n%s", gcc, err, out)
	}
	var out bytes.Buffer
	p, err := rsp.LaunchWith(emu, []string{"-L", sysroot, exe, rec}, []string{"PATH=/usr/bin:/bin"},
		rsp.Options{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ppc64.NewResolver(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	fn, err := res.Lookup("recorded")
	if err != nil {
		t.Fatal(err)
	}
	bp := fn.Breakpoint()
	if _, err := p.WriteMemory(bp, p.Info().Arch.BreakInstr); err != nil {
		t.Fatal(err)
	}
	ths, err := p.Threads()
	if err != nil || len(ths) != 1 {
		t.Fatalf("threads %v, %v", ths, err)
	}
	if err := p.Resume(ths[0], 0); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-p.Events():
		if !ok || ev.Kind != tgt.EventSignal || ev.Trap != tgt.TrapBreakpoint || ev.PC != bp {
			t.Fatalf("event %+v (stream open %v, %v), want the breakpoint at %#x; output:\n%s", ev, ok, p.Err(), bp, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the program did not reach recorded() in 60 s")
	}
	wantAux, wantMods := readRecord(t, rec)

	lay := procimage.Layout{Order: binary.BigEndian, PtrSize: 8}
	raw, err := p.Auxv()
	if err != nil {
		t.Fatal(err)
	}
	aux, err := procimage.ParseAuxv(raw, lay)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range wantAux {
		if aux[k] != v {
			t.Errorf("auxv key %d = %#x, the program's getauxval says %#x", k, aux[k], v)
		}
	}
	objs, err := procimage.Image{Mem: rspMemory{p}, Layout: lay}.Objects(aux, exe)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, o := range objs {
		name := o.Path
		if i == 0 {
			name = "" // dl_iterate_phdr names the executable ""
		}
		got = append(got, strings.TrimSpace(fmt.Sprintf("%#x %s", o.Bias, name)))
	}
	if strings.Join(got, "\n") != strings.Join(wantMods, "\n") {
		t.Errorf("objects:\n%s\ndl_iterate_phdr:\n%s", strings.Join(got, "\n"), strings.Join(wantMods, "\n"))
	}
	if len(objs) < 3 {
		t.Errorf("%d objects; want the executable, libc and the dynamic linker at least", len(objs))
	}
}

// readRecord parses the record of testdata/selfaux.c.
func readRecord(t *testing.T, path string) (map[uint64]uint64, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	aux := map[uint64]uint64{}
	var mods []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "aux":
			k, _ := strconv.ParseUint(f[1], 10, 64)
			v, _ := strconv.ParseUint(f[2], 0, 64)
			aux[k] = v
		case len(f) >= 2 && f[0] == "module":
			v, _ := strconv.ParseUint(f[1], 0, 64)
			mods = append(mods, strings.TrimSpace(fmt.Sprintf("%#x %s", v, strings.Join(f[2:], " "))))
		default:
			t.Fatalf("record line %q", line)
		}
	}
	if len(aux) != 7 || len(mods) == 0 {
		t.Fatalf("record %q", b)
	}
	return aux, mods
}
