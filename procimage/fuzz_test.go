package procimage_test

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/hpcdap/hpcdap/procimage"
)

// layouts are the four a process can have.
var layouts = []procimage.Layout{
	{Order: binary.LittleEndian, PtrSize: 8}, {Order: binary.BigEndian, PtrSize: 8},
	{Order: binary.LittleEndian, PtrSize: 4}, {Order: binary.BigEndian, PtrSize: 4},
}

// blob is memory holding b at base, padded with zeros to a whole page; the rest is unmapped.
type blob struct {
	base uint64
	b    []byte
}

func (m blob) ReadAt(p []byte, addr uint64) (int, error) {
	size := uint64((len(m.b) + 4095) &^ 4095)
	if addr < m.base || addr-m.base > size || uint64(len(p)) > size-(addr-m.base) {
		return 0, fmt.Errorf("unmapped %#x+%d", addr, len(p))
	}
	clear(p)
	if off := addr - m.base; off < uint64(len(m.b)) {
		copy(p, m.b[off:])
	}
	return len(p), nil
}

const base = 0x10000

// imageOf lays out, in one blob at base in layout l, what Objects reads: program headers
// (PT_PHDR, PT_DYNAMIC) at 0x40, a dynamic section with DT_DEBUG at 0x200, r_debug at 0x300,
// one link_map per name from 0x400 (the first, the executable's, unnamed) and the names from
// 0x800. biases[i] is entry i's l_addr.
func imageOf(l procimage.Layout, names []string, biases []uint64) []byte {
	b := make([]byte, 0x800)
	ps := l.PtrSize
	word := func(off int, v uint64) {
		if ps == 4 {
			l.Order.PutUint32(b[off:], uint32(v))
		} else {
			l.Order.PutUint64(b[off:], v)
		}
	}
	phent := 56
	if ps == 4 {
		phent = 32
	}
	// Elf32_Phdr: type, offset, vaddr, paddr, filesz, memsz; Elf64_Phdr: type, flags, offset,
	// vaddr, paddr, filesz, memsz.
	vaddr, memsz := 16, 40
	if ps == 4 {
		vaddr, memsz = 8, 20
	}
	l.Order.PutUint32(b[0x40:], uint32(elf.PT_PHDR))
	word(0x40+vaddr, 0x40)
	l.Order.PutUint32(b[0x40+phent:], uint32(elf.PT_DYNAMIC))
	word(0x40+phent+vaddr, 0x200)
	word(0x40+phent+memsz, uint64(4*ps))
	word(0x200, uint64(elf.DT_DEBUG))
	word(0x200+ps, base+0x300)
	l.Order.PutUint32(b[0x300:], 1) // r_version
	word(0x300+ps, base+0x400)      // r_map
	word(0x300+2*ps, 0x7777)        // r_brk
	word(0x300+4*ps, 0x8888)        // r_ldbase
	str := 0x800
	for i, name := range names {
		at := 0x400 + 5*ps*i
		word(at, biases[i])
		if name != "" {
			word(at+ps, uint64(base+str))
			b = append(append(b, name...), 0)
			str += len(name) + 1
		}
		word(at+2*ps, uint64(0x1000*(i+1)))
		if i+1 < len(names) {
			word(at+3*ps, uint64(base+at+5*ps))
		}
		if i > 0 {
			word(at+4*ps, uint64(base+at-5*ps))
		}
	}
	return b
}

// auxOf is the auxv that points at an image's two program headers in layout l.
func auxOf(l procimage.Layout) procimage.Auxv {
	phent := uint64(56)
	if l.PtrSize == 4 {
		phent = 32
	}
	return procimage.Auxv{procimage.AtPhdr: base + 0x40, procimage.AtPhnum: 2, procimage.AtPhent: phent}
}

// TestObjectsEveryLayout walks the same link map laid out in each pointer size and byte
// order, and checks that a looping list is an error.
func TestObjectsEveryLayout(t *testing.T) {
	names := []string{"", "/lib/libc.so.6", "/lib/ld.so.1"}
	biases := []uint64{0, 0xf7e00000, 0xf7f80000}
	for _, l := range layouts {
		t.Run(fmt.Sprintf("%v/%d", l.Order, l.PtrSize), func(t *testing.T) {
			im := procimage.Image{Mem: blob{base, imageOf(l, names, biases)}, Layout: l}
			objs, err := im.Objects(auxOf(l), "/exe")
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprint([]procimage.Object{{Path: "/exe", Bias: base, Dynamic: 0x1000},
				{Path: names[1], Bias: biases[1], Dynamic: 0x2000}, {Path: names[2], Bias: biases[2], Dynamic: 0x3000}})
			if fmt.Sprint(objs) != want {
				t.Errorf("objects %v, want %v", objs, want)
			}
			rd, err := im.RDebug(base + 0x300)
			if err != nil || rd != (procimage.RDebug{Version: 1, Map: base + 0x400, Brk: 0x7777, LdBase: 0x8888}) {
				t.Errorf("r_debug %+v, %v", rd, err)
			}
			ents, err := im.LinkMap(rd.Map)
			if err != nil || len(ents) != 3 || ents[2].Prev != ents[1].Node || ents[1].Next != ents[2].Node {
				t.Errorf("link map %+v, %v", ents, err)
			}
			// A name reader's names are taken, its error ends the walk.
			objsNamed, err := im.LinkObjects(rd.Map, func(e procimage.LinkEntry) (string, error) {
				return fmt.Sprintf("%#x", e.Node), nil
			})
			if err != nil || len(objsNamed) != 3 || objsNamed[2].Path != fmt.Sprintf("%#x", ents[2].Node) || objsNamed[1].Addr != biases[1] {
				t.Errorf("link objects named by the reader: %+v, %v", objsNamed, err)
			}
			if _, err := im.LinkObjects(rd.Map, func(procimage.LinkEntry) (string, error) { return "", errors.New("no") }); err == nil {
				t.Error("a name reader's error was dropped")
			}
			ex, err := im.Executable(auxOf(l))
			if err != nil || ex != (procimage.Executable{Bias: base, Dynamic: base + 0x200, DynamicSize: uint64(4 * l.PtrSize)}) {
				t.Errorf("executable %+v, %v", ex, err)
			}
			img := imageOf(l, names, biases)
			next := 0x400 + 2*5*l.PtrSize + 3*l.PtrSize // the last entry's l_next, back to the first
			if l.PtrSize == 4 {
				l.Order.PutUint32(img[next:], base+0x400)
			} else {
				l.Order.PutUint64(img[next:], base+0x400)
			}
			if _, err := (procimage.Image{Mem: blob{base, img}, Layout: l}).Objects(auxOf(l), "/exe"); err == nil {
				t.Error("a looping link_map list gave no error")
			}
		})
	}
}

// FuzzParseAuxv decodes arbitrary bytes as an auxiliary vector in each layout: a vector or an
// error, and never more entries than the bytes hold pairs.
func FuzzParseAuxv(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/auxv"); err == nil {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, 12))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, l := range layouts {
			a, err := procimage.ParseAuxv(b, l)
			if err == nil && len(a) > len(b)/(2*l.PtrSize) {
				t.Fatalf("%d entries from %d bytes", len(a), len(b))
			}
			if _, ok := a[procimage.AtNull]; ok {
				t.Fatal("AT_NULL kept as an entry")
			}
		}
	})
}

// FuzzObjects feeds arbitrary memory to the whole walk (program headers, dynamic section,
// r_debug, link map, names) in each layout: objects or an error, never a panic or a hang.
func FuzzObjects(f *testing.F) {
	f.Add(imageOf(layouts[0], []string{"", "/usr/lib/x86_64-linux-gnu/libc.so.6"}, []uint64{0, 0x7f0000000000}), uint8(2))
	f.Add(imageOf(layouts[3], []string{"", "/lib/libc.so.6", "/lib/ld.so.1"}, []uint64{0, 0xf7e00000, 0xf7f80000}), uint8(2))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, img []byte, phnum uint8) {
		for _, l := range layouts {
			aux := auxOf(l)
			aux[procimage.AtPhnum] = uint64(phnum)
			objs, err := procimage.Image{Mem: blob{base, img}, Layout: l}.Objects(aux, "exe")
			if err == nil && (len(objs) == 0 || objs[0].Path != "exe") {
				t.Fatalf("no error and objects %v", objs)
			}
		}
	})
}

// FuzzDecodeLinkEntry decodes arbitrary bytes as link_map heads and r_debug structures.
func FuzzDecodeLinkEntry(f *testing.F) {
	f.Add(imageOf(layouts[1], []string{"", "/a"}, []uint64{0, 1})[0x300:0x440])
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, l := range layouts {
			e, err := procimage.DecodeLinkEntry(b, 42, l)
			if (err == nil) != (len(b) >= 5*l.PtrSize) || (err == nil && e.Node != 42) {
				t.Fatalf("%d bytes: %+v, %v", len(b), e, err)
			}
			if _, err := procimage.DecodeRDebug(b, l); (err == nil) != (len(b) >= 5*l.PtrSize) {
				t.Fatalf("r_debug of %d bytes: %v", len(b), err)
			}
			procimage.DynamicValue(b, elf.DT_DEBUG, l)
			if n := len(b) / 32; n > 0 {
				procimage.DecodeProgs(b, n, 32, l)
			}
		}
	})
}

// FuzzParseStatus: /proc/TID/status decoding never panics, and what it accepts has the fields.
func FuzzParseStatus(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		f.Add(b)
	}
	if b, err := os.ReadFile("/proc/1/status"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("State:\tt (tracing stop)\nTgid:\t42\nTracerPid:\t7\nSigBlk:\t0000000000000000\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := procimage.ParseStatus(b)
		if err == nil && st.State == 0 {
			t.Fatalf("accepted %q without a state", b)
		}
	})
}
