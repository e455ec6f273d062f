package threaddb_test

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/threaddb"
)

// snapshot is a memory image written by testdata/selfdump.c: readable regions, of which the
// non-zero 4 KiB chunks were saved.
type snapshot struct {
	maps   [][2]uint64       // readable [lo, hi) ranges
	chunks map[uint64][]byte // 4 KiB chunks by address
	recs   []selfRecord      // what each thread recorded about itself
	mods   []selfModule      // dl_iterate_phdr
	pid    int               // the process id (the initial thread's LWP)
	key    uint32            // the pthread key the threads set
}

type selfRecord struct {
	tid                                             int
	self, tp, tlsAddr, arrAddr, spec, start, ieAddr uint64
	tls, arr, ie                                    int64
}

type selfModule struct {
	bias uint64
	name string
}

func (s *snapshot) ReadAt(b []byte, addr uint64) (int, error) {
	for i := 0; i < len(b); {
		a := addr + uint64(i)
		if !s.mapped(a) {
			return i, fmt.Errorf("address %#x is not mapped in the snapshot", a)
		}
		page := a &^ 4095
		n := min(len(b)-i, int(page+4096-a))
		if c, ok := s.chunks[page]; ok {
			copy(b[i:i+n], c[a-page:])
		} else {
			clear(b[i : i+n])
		}
		i += n
	}
	return len(b), nil
}

func (s *snapshot) mapped(a uint64) bool {
	for _, m := range s.maps {
		if a >= m[0] && a < m[1] {
			return true
		}
	}
	return false
}

// LWPs and ThreadPointer serve the records: the r13 value each thread read from itself.
func (s *snapshot) LWPs() ([]int, error) {
	var l []int
	for _, r := range s.recs {
		l = append(l, r.tid)
	}
	return l, nil
}

func (s *snapshot) ThreadPointer(lwp int) (uint64, error) {
	for _, r := range s.recs {
		if r.tid == lwp {
			return r.tp, nil
		}
	}
	return 0, fmt.Errorf("no LWP %d", lwp)
}

func readSnapshot(t *testing.T, path string) *snapshot {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	s := &snapshot{chunks: map[uint64][]byte{}}
	num := func(x string) uint64 {
		v, err := strconv.ParseUint(strings.TrimPrefix(x, "0x"), 16, 64)
		if !strings.HasPrefix(x, "0x") {
			v, err = strconv.ParseUint(x, 10, 64)
		}
		if err != nil {
			t.Fatalf("snapshot %s: number %q: %v", path, x, err)
		}
		return v
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("snapshot %s: %v (truncated?)", path, err)
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "end":
			return s
		case "pid":
			s.pid = int(num(f[1]))
		case "key":
			s.key = uint32(num(f[1]))
		case "thread":
			s.recs = append(s.recs, selfRecord{tid: int(num(f[1])), self: num(f[2]), tp: num(f[3]),
				tlsAddr: num(f[4]), tls: int64(num(f[5])), arrAddr: num(f[6]), arr: int64(num(f[7])),
				spec: num(f[8]), start: num(f[9]), ieAddr: num(f[10]), ie: int64(num(f[11]))})
		case "module":
			name := ""
			if len(f) > 2 {
				name = f[2]
			}
			s.mods = append(s.mods, selfModule{bias: num(f[1]), name: name})
		case "map":
			s.maps = append(s.maps, [2]uint64{num(f[1]), num(f[2])})
		case "data":
			b := make([]byte, num(f[2]))
			if _, err := io.ReadFull(r, b); err != nil {
				t.Fatalf("snapshot %s: chunk %s: %v", path, f[1], err)
			}
			s.chunks[num(f[1])] = b
		default:
			t.Fatalf("snapshot %s: unexpected line %q", path, line)
		}
	}
}

// TestPPC64UnderQEMU runs a Power program (ppc64 big-endian and ppc64le, static and dynamic,
// real glibc 2.36 from the cross sysroots) under QEMU user mode. Each thread records its own
// pthread_self(), gettid(), r13, TLS addresses and values, TSD value and start routine; main
// writes those and a snapshot of the address space. The package, given only the snapshot, the
// module list and each LWP's r13, must map every thread the same way.
func TestPPC64UnderQEMU(t *testing.T) {
	src, _ := filepath.Abs("testdata/selfdump.c")
	ieSrc, _ := filepath.Abs("testdata/libie.c")
	for _, c := range []struct {
		name, gcc, qemu, sysroot string
	}{
		{"ppc64", "powerpc64-linux-gnu-gcc", "qemu-ppc64", "/usr/powerpc64-linux-gnu"},
		{"ppc64le", "powerpc64le-linux-gnu-gcc", "qemu-ppc64le", "/usr/powerpc64le-linux-gnu"},
	} {
		for _, static := range []bool{true, false} {
			name := c.name + "/dynamic"
			if static {
				name = c.name + "/static"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testenv.NeedTool(t, c.gcc, "gcc-"+strings.ReplaceAll(c.name, "ppc64le", "powerpc64le")+"-linux-gnu")
				testenv.NeedTool(t, c.qemu, "qemu-user")
				dir := t.TempDir()
				exe := filepath.Join(dir, "selfdump")
				args := []string{"-g", "-O0", "-pthread", "-o", exe, src}
				if static {
					args = append(args, "-static")
				} else {
					run(t, dir, c.gcc, "-g", "-shared", "-fPIC", "-o", filepath.Join(dir, "libie.so"), ieSrc)
					args = append(args, "-DWITH_IE", "-ldl", "-Wl,-rpath,"+dir)
				}
				run(t, dir, c.gcc, args...)
				dump := filepath.Join(dir, "dump")
				run(t, dir, c.qemu, "-L", c.sysroot, exe, dump)
				ppc64Check(t, readSnapshot(t, dump), exe, c.sysroot, static)
			})
		}
	}
}

func ppc64Check(t *testing.T, s *snapshot, exe, sysroot string, static bool) {
	var mods []threaddb.Module
	var exeMod threaddb.Module
	for _, m := range s.mods {
		// QEMU opens a guest path under the sysroot if it exists there, else as it is.
		path := exe
		if m.name != "" {
			path = ""
			for _, cand := range []string{filepath.Join(sysroot, m.name), m.name} {
				if _, err := os.Stat(cand); err == nil {
					path = cand
					break
				}
			}
			if path == "" {
				continue // e.g. QEMU's vDSO: no file
			}
		}
		mod := threaddb.Module{Path: path, Bias: m.bias}
		if path == exe {
			exeMod = mod
		}
		mods = append(mods, mod)
	}
	p, err := threaddb.Open(s.pid, mods, s, s)
	if err != nil {
		t.Fatal(err)
	}
	lib := p.Library()
	if lib == nil || lib.Machine != elf.EM_PPC64 || lib.Static != static {
		t.Fatalf("Library = %+v", lib)
	}
	list, err := p.List()
	if err != nil {
		t.Fatal(err)
	}
	if list.Status != threaddb.StatusReady || len(list.Threads) != len(s.recs) {
		t.Fatalf("List: status %v, %d threads; the program has %d", list.Status, len(list.Threads), len(s.recs))
	}
	byLWP := map[int]threaddb.Thread{}
	for _, th := range list.Threads {
		byLWP[th.LWP] = th
	}
	tlsOff := testenv.NMSymbol(t, exe, "tlsvar")
	arrOff := testenv.NMSymbol(t, exe, "tlsarr") + 8
	order := lib.Order
	for _, r := range s.recs {
		th, ok := byLWP[r.tid]
		if !ok {
			t.Errorf("LWP %d missing from List", r.tid)
			continue
		}
		if th.Pthread != r.self {
			t.Errorf("LWP %d: pthread_t %#x, pthread_self() said %#x", r.tid, th.Pthread, r.self)
		}
		if th.StartRoutine != r.start {
			t.Errorf("LWP %d: start routine %#x, the program passed %#x", r.tid, th.StartRoutine, r.start)
		}
		if m, err := p.MapThreadPointer(r.tp); err != nil || m != th {
			t.Errorf("MapThreadPointer(r13 = %#x) = %+v, %v; List has %+v", r.tp, m, err, th)
		}
		if m, err := p.MapLWP(r.tid); err != nil || m != th {
			t.Errorf("MapLWP(%d) = %+v, %v; List has %+v", r.tid, m, err, th)
		}
		if m, err := p.MapPthread(r.self); err != nil || m.LWP != r.tid {
			t.Errorf("MapPthread(%#x) = LWP %d, %v; want %d", r.self, m.LWP, err, r.tid)
		}
		for _, v := range []struct {
			name      string
			off, want uint64
			val       int64
			size      int
		}{{"tlsvar", tlsOff, r.tlsAddr, r.tls, 4}, {"tlsarr[1]", arrOff, r.arrAddr, r.arr, 8}} {
			addr, err := p.TLSAddress(th, exeMod, v.off)
			if err != nil || addr != v.want {
				t.Errorf("LWP %d: &%s = %#x, %v; the thread said %#x", r.tid, v.name, addr, err, v.want)
				continue
			}
			b := make([]byte, v.size)
			if _, err := s.ReadAt(b, addr); err != nil {
				t.Fatal(err)
			}
			got := int64(int32(order.Uint32(b)))
			if v.size == 8 {
				got = int64(order.Uint64(b))
			}
			if got != v.val {
				t.Errorf("LWP %d: %s = %d, the thread said %d", r.tid, v.name, got, v.val)
			}
		}
		if !static {
			ie := moduleFor(t, mods, "libie.so")
			addr, err := p.TLSAddress(th, ie, testenv.NMSymbol(t, ie.Path, "ievar"))
			if err != nil || addr != r.ieAddr {
				t.Errorf("LWP %d: &ievar = %#x, %v; the thread said %#x", r.tid, addr, err, r.ieAddr)
			} else {
				b := make([]byte, 4)
				if _, err := s.ReadAt(b, addr); err != nil {
					t.Fatal(err)
				}
				if got := int64(int32(order.Uint32(b))); got != r.ie {
					t.Errorf("LWP %d: ievar = %d, the thread said %d", r.tid, got, r.ie)
				}
			}
		}
		if v, err := p.Specific(th, s.key); err != nil || v != r.spec {
			t.Errorf("LWP %d: Specific(%d) = %#x, %v; pthread_getspecific said %#x", r.tid, s.key, v, err, r.spec)
		}
	}
	// The initial thread heads the user-stack list, which is walked first.
	if first := list.Threads[0]; first.LWP != s.pid || first.StartRoutine != 0 {
		t.Errorf("List starts with %+v, not the initial thread (LWP %d)", first, s.pid)
	}
}
