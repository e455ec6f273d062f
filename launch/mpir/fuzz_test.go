package mpir

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/hpcdap/hpcdap/procimage"
)

// blobMem is memory holding one blob at base; everything else is unmapped.
type blobMem struct {
	base uint64
	b    []byte
}

// ReadMemory treats the blob as padded with zeros to a whole page, as real mappings are.
func (m blobMem) ReadMemory(_ context.Context, addr uint64, n int) ([]byte, error) {
	size := uint64((len(m.b) + 4095) &^ 4095)
	if n < 0 || addr < m.base || addr-m.base > size || uint64(n) > size-(addr-m.base) {
		return nil, fmt.Errorf("unmapped %#x+%d", addr, n)
	}
	out := make([]byte, n)
	if off := addr - m.base; off < uint64(len(m.b)) {
		copy(out, m.b[off:])
	}
	return out, nil
}

const blobBase = 0x400000

// lp64 is the layout of the launchers these tests read: 64-bit little-endian.
var lp64 = procimage.Layout{Order: binary.LittleEndian, PtrSize: 8}

// imageOf lays out, in one blob at blobBase, what Objects reads: program headers (PT_PHDR and
// PT_DYNAMIC), a dynamic section with DT_DEBUG, r_debug, and one link_map per object.
func imageOf(names []string, biases []uint64) []byte {
	le := binary.LittleEndian
	b := make([]byte, 0x1000)
	put64 := func(off int, v uint64) {
		for len(b) < off+8 {
			b = append(b, 0)
		}
		le.PutUint64(b[off:], v)
	}
	put32 := func(off int, v uint32) {
		for len(b) < off+4 {
			b = append(b, 0)
		}
		le.PutUint32(b[off:], v)
	}
	// Two program headers at 0x40: PT_PHDR (vaddr 0x40) and PT_DYNAMIC (vaddr 0x200).
	put32(0x40, uint32(elf.PT_PHDR))
	put64(0x40+16, 0x40)
	put32(0x40+56, uint32(elf.PT_DYNAMIC))
	put64(0x40+56+16, 0x200)
	put64(0x40+56+40, 32)
	put64(0x200, uint64(elf.DT_DEBUG))
	put64(0x208, blobBase+0x300) // r_debug
	put64(0x308, blobBase+0x400) // r_map
	at := 0x400
	strAt := 0x800
	for i, name := range names {
		put64(at, biases[i])
		if name != "" {
			put64(at+8, uint64(blobBase+strAt))
			for len(b) < strAt+len(name)+1 {
				b = append(b, 0)
			}
			copy(b[strAt:], name)
			strAt += len(name) + 1
		}
		if i+1 < len(names) {
			put64(at+24, uint64(blobBase+at+40))
		}
		at += 40
	}
	return b
}

// fuzzAux is the auxv that points Objects at an image's program headers.
func fuzzAux() Auxv {
	return Auxv{procimage.AtPhdr: blobBase + 0x40, procimage.AtPhnum: 2, procimage.AtPhent: 56}
}

// realObjectNames lists the objects of a real process (this test's shell child is not
// needed: /proc/self/maps of the test binary gives real library names and addresses).
func realObjectNames() ([]string, []uint64) {
	names := []string{""}
	biases := []uint64{0}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return names, biases
	}
	seen := map[string]bool{}
	for _, line := range splitLines(string(b)) {
		var lo, hi, off uint64
		var perm, dev, path string
		var inode int
		if n, _ := fmt.Sscanf(line, "%x-%x %s %x %s %d %s", &lo, &hi, &perm, &off, &dev, &inode, &path); n == 7 &&
			off == 0 && !seen[path] {
			seen[path] = true
			names = append(names, path)
			biases = append(biases, lo)
		}
	}
	return names, biases
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// The image builder round-trips through Objects (a sanity check of the fuzz seed).
func TestObjectsImage(t *testing.T) {
	names, biases := realObjectNames()
	objs, err := Objects(context.Background(), blobMem{blobBase, imageOf(names, biases)}, lp64,
		fuzzAux(), "/the/exe")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(names) || objs[0].Path != "/the/exe" || objs[0].Bias != blobBase {
		t.Fatalf("objects %+v", objs)
	}
	for i := 1; i < len(objs); i++ {
		if objs[i].Path != names[i] || objs[i].Bias != biases[i] {
			t.Errorf("object %d = %+v, want %s at %#x", i, objs[i], names[i], biases[i])
		}
	}
	// A loop in the list is an error, not a hang.
	img := imageOf([]string{"", "/a"}, []uint64{0, 0x1000})
	binary.LittleEndian.PutUint64(img[0x400+40+24:], blobBase+0x400)
	if _, err := Objects(context.Background(), blobMem{blobBase, img}, lp64, fuzzAux(), ""); err == nil {
		t.Error("a looping link_map list gave no error")
	}
}

// FuzzObjects feeds arbitrary process images to the link-map walk: it must return objects or
// an error, never panic or loop.
func FuzzObjects(f *testing.F) {
	names, biases := realObjectNames()
	f.Add(imageOf(names, biases), uint8(2))
	f.Add(imageOf([]string{"", "/usr/lib/x86_64-linux-gnu/libopen-rte.so.40"}, []uint64{0, 0x7f0000000000}), uint8(2))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, img []byte, phnum uint8) {
		aux := Auxv{procimage.AtPhdr: blobBase + 0x40, procimage.AtPhnum: uint64(phnum), procimage.AtPhent: 56}
		objs, err := Objects(context.Background(), blobMem{blobBase, img}, lp64, aux, "exe")
		if err == nil && len(objs) == 0 {
			t.Fatal("no error and no objects")
		}
	})
}

// tableImage lays out a proctable: the pointer variable at 0, the size at 8, entries at 0x40,
// strings after them.
func tableImage(procs []Proc) []byte {
	le := binary.LittleEndian
	b := make([]byte, 0x40+EntrySize*len(procs))
	le.PutUint64(b, blobBase+0x40)
	le.PutUint32(b[8:], uint32(len(procs)))
	for i, p := range procs {
		e := 0x40 + EntrySize*i
		le.PutUint64(b[e:], uint64(blobBase+len(b)))
		b = append(append(b, p.Host...), 0)
		le.PutUint64(b[e+8:], uint64(blobBase+len(b)))
		b = append(append(b, p.Executable...), 0)
		le.PutUint32(b[e+16:], uint32(p.Pid))
		le.PutUint32(b[e+20:], 0x2f706d74) // the padding Open MPI leaves
	}
	return b
}

func TestReadTableImage(t *testing.T) {
	want := []Proc{{0, "node1", "./target", 31201}, {1, "node1", "./target", 31202}, {2, "node2", "/abs/x", 5}}
	got, err := ReadTable(context.Background(), blobMem{blobBase, tableImage(want)}, lp64, blobBase, blobBase+8)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// A size beyond the memory fails cleanly.
	img := tableImage(want)
	binary.LittleEndian.PutUint32(img[8:], 1000)
	if _, err := ReadTable(context.Background(), blobMem{blobBase, img}, lp64, blobBase, blobBase+8); err == nil {
		t.Error("size 1000 over 3 entries: no error")
	}
	binary.LittleEndian.PutUint32(img[8:], uint32(0xffffffff))
	if _, err := ReadTable(context.Background(), blobMem{blobBase, img}, lp64, blobBase, blobBase+8); err == nil {
		t.Error("negative size: no error")
	}
}

// A 32-bit big-endian launcher's table (12-byte entries, 4-byte pointers) is read as it is laid
// out, not as LP64.
func TestReadTableILP32(t *testing.T) {
	be := binary.BigEndian
	want := []Proc{{0, "n1", "./a", 71}, {1, "n2", "./b", 72}}
	b := make([]byte, 0x40+12*len(want))
	be.PutUint32(b, blobBase+0x40)
	be.PutUint32(b[8:], uint32(len(want)))
	for i, p := range want {
		e := 0x40 + 12*i
		be.PutUint32(b[e:], uint32(blobBase+len(b)))
		b = append(append(b, p.Host...), 0)
		be.PutUint32(b[e+4:], uint32(blobBase+len(b)))
		b = append(append(b, p.Executable...), 0)
		be.PutUint32(b[e+8:], uint32(p.Pid))
	}
	got, err := ReadTable(context.Background(), blobMem{blobBase, b}, procimage.Layout{Order: be, PtrSize: 4}, blobBase, blobBase+8)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, err := ReadTable(context.Background(), blobMem{blobBase, b}, lp64, blobBase, blobBase+8); err == nil && fmt.Sprint(got) == fmt.Sprint(want) {
		t.Errorf("the ILP32 table read as LP64 gave the same ranks")
	}
}

// FuzzReadTable decodes arbitrary memory as a proctable: results or errors, never a panic.
func FuzzReadTable(f *testing.F) {
	var procs []Proc
	for i := range 16 {
		procs = append(procs, Proc{Rank: i, Host: "node" + strconv.Itoa(1+i/4), Executable: "/tmp/mpi_ranks", Pid: 1000 + i})
	}
	f.Add(tableImage(procs))
	f.Add(tableImage(procs[:1]))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, img []byte) {
		got, err := ReadTable(context.Background(), blobMem{blobBase, img}, lp64, blobBase, blobBase+8)
		if err == nil {
			for i, p := range got {
				if p.Rank != i {
					t.Fatalf("entry %d has rank %d", i, p.Rank)
				}
			}
		}
	})
}
