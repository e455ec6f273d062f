package threaddb_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/threaddb"
)

// TestMiniELFRoundTrip checks the synthetic ELF writer the fuzz seeds rely on: the descriptors
// copied from each real libc decode exactly as from the real file.
func TestMiniELFRoundTrip(t *testing.T) {
	for _, path := range []string{hostLibc, ppc64Libc, ppc64leLibc} {
		real := readLib(t, path)
		order, machine, syms := threadDBSymbols(t, path)
		mini, err := threaddb.ReadLibrary(bytes.NewReader(miniELF(order, machine, syms)), threaddb.Module{Path: "mini"})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if mini.Version != real.Version || mini.Machine != real.Machine || mini.Order != real.Order || len(mini.DescNames()) != len(real.DescNames()) {
			t.Fatalf("%s: mini %s %v %v %d names; real %s %v %v %d", path, mini.Version, mini.Machine, mini.Order,
				len(mini.DescNames()), real.Version, real.Machine, real.Order, len(real.DescNames()))
		}
		for _, n := range real.DescNames() {
			a, _ := real.Desc(n)
			b, _ := mini.Desc(n)
			if a != b {
				t.Errorf("%s: %s: real %v, mini %v", path, n, a, b)
			}
		}
	}
}

// FuzzDecodeDesc decodes arbitrary 12-byte triples in both byte orders.
func FuzzDecodeDesc(f *testing.F) {
	for _, path := range []string{hostLibc, ppc64Libc, ppc64leLibc} {
		_, _, syms := threadDBSymbols(f, path)
		for _, s := range syms {
			if len(s.data) == threaddb.DescSize {
				f.Add(s.data, path == ppc64Libc)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, big bool) {
		var order binary.ByteOrder = binary.LittleEndian
		if big {
			order = binary.BigEndian
		}
		d, err := threaddb.DecodeDesc(b, order)
		if err != nil {
			return
		}
		var back [threaddb.DescSize]byte
		order.PutUint32(back[0:], d.Bits)
		order.PutUint32(back[4:], d.Count)
		order.PutUint32(back[8:], d.Offset)
		if !bytes.Equal(back[:], b) || d.Bits == 0 {
			t.Fatalf("DecodeDesc(%x) = %v does not round-trip", b, d)
		}
		_, _ = d.ElemAddr(1<<63, uint64(d.Count))
	})
}

// FuzzReadLibrary feeds arbitrary ELF files to the descriptor reader, seeded with small ELF files
// carrying the real descriptors of the x86_64, ppc64 and ppc64le libc and of a static program.
func FuzzReadLibrary(f *testing.F) {
	for _, path := range []string{hostLibc, ppc64Libc, ppc64leLibc} {
		order, machine, syms := threadDBSymbols(f, path)
		f.Add(miniELF(order, machine, syms))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := threaddb.ReadLibrary(bytes.NewReader(data), threaddb.Module{Path: "fuzz"})
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, n := range l.DescNames() {
			l.Desc(n)
		}
	})
}

// fuzzTarget is a process made of one fuzzed memory block at miniBss, two LWPs whose thread
// pointers are read from the block, and the static layout of the host's glibc descriptors.
type fuzzTarget struct {
	mem []byte
}

func (m *fuzzTarget) ReadAt(b []byte, addr uint64) (int, error) {
	if addr < miniBss || addr-miniBss > uint64(len(m.mem)) || uint64(len(b)) > uint64(len(m.mem))-(addr-miniBss) {
		return 0, fmt.Errorf("address %#x+%d outside the image", addr, len(b))
	}
	return copy(b, m.mem[addr-miniBss:]), nil
}

func (m *fuzzTarget) LWPs() ([]int, error) { return []int{100, 101}, nil }

func (m *fuzzTarget) ThreadPointer(lwp int) (uint64, error) {
	if len(m.mem) < 16 || (lwp != 100 && lwp != 101) {
		return 0, errors.New("no registers")
	}
	return binary.LittleEndian.Uint64(m.mem[8*(lwp-100):]), nil
}

// Addresses of the static program's variables in the fuzzed image.
const (
	fuzzStackUser = miniBss + 0x20
	fuzzStackUsed = miniBss + 0x30
	fuzzSlotinfo  = miniBss + 0x40
	fuzzNThreads  = miniBss + 0x48
	fuzzKeys      = miniBss + 0x50
)

// fuzzLibrary writes a static-layout thread library (the host static program's descriptors) to
// a file and returns its path and descriptors.
func fuzzLibrary(f *testing.F) (string, *threaddb.Library) {
	progs := buildPrograms(f)
	order, machine, syms := threadDBSymbols(f, progs.static)
	syms = append(syms,
		miniSym{name: "_dl_stack_user", addr: fuzzStackUser},
		miniSym{name: "_dl_stack_used", addr: fuzzStackUsed},
		miniSym{name: "_dl_tls_dtv_slotinfo_list", addr: fuzzSlotinfo},
		miniSym{name: "__nptl_nthreads", addr: fuzzNThreads},
		miniSym{name: "__pthread_keys", addr: fuzzKeys})
	path := filepath.Join(f.TempDir(), "libfuzz.so")
	if err := os.WriteFile(path, miniELF(order, machine, syms), 0o644); err != nil {
		f.Fatal(err)
	}
	fh, err := os.Open(path)
	if err != nil {
		f.Fatal(err)
	}
	defer fh.Close()
	lib, err := threaddb.ReadLibrary(fh, threaddb.Module{Path: path})
	if err != nil {
		f.Fatal(err)
	}
	return path, lib
}

// seedImage builds a well-formed memory image: two threads on the user list (the initial thread
// and one more), whose thread pointers are the register words at the start of the image.
func seedImage(lib *threaddb.Library, cyclic bool) []byte {
	desc := func(n string) threaddb.Desc { d, _ := lib.Desc(n); return d }
	size, _ := lib.Sizeof("pthread")
	img := make([]byte, 0x100+2*int(size)+0x100)
	le := binary.LittleEndian
	pd := []uint64{miniBss + 0x100, miniBss + 0x100 + uint64(size)}
	listOff := uint64(desc("pthread_list").Offset)
	put := func(addr, v uint64) { le.PutUint64(img[addr-miniBss:], v) }
	put32 := func(addr uint64, v uint32) { le.PutUint32(img[addr-miniBss:], v) }
	put(miniBss, pd[0])
	put(miniBss+8, pd[1])
	head := uint64(fuzzStackUser)
	nodes := []uint64{pd[0] + listOff, pd[1] + listOff}
	put(head, nodes[0])
	put(head+8, nodes[1])
	put(nodes[0], nodes[1])
	put(nodes[0]+8, head)
	put(nodes[1], head)
	if cyclic {
		put(nodes[1], nodes[0])
	}
	put(nodes[1]+8, nodes[0])
	put(fuzzStackUsed, fuzzStackUsed)
	put(fuzzStackUsed+8, fuzzStackUsed)
	for i, p := range pd {
		put32(p+uint64(desc("pthread_tid").Offset), uint32(100+i))
	}
	put32(fuzzNThreads, 2)
	return img
}

// TestCorruptThreadList checks that a cyclic list in target memory ends in an error, and that the
// well-formed seed image decodes as built.
func TestCorruptThreadList(t *testing.T) {
	progs := buildPrograms(t)
	order, machine, syms := threadDBSymbols(t, progs.static)
	syms = append(syms,
		miniSym{name: "_dl_stack_user", addr: fuzzStackUser},
		miniSym{name: "_dl_stack_used", addr: fuzzStackUsed},
		miniSym{name: "__nptl_nthreads", addr: fuzzNThreads})
	path := filepath.Join(t.TempDir(), "lib.so")
	if err := os.WriteFile(path, miniELF(order, machine, syms), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := readLib(t, path)
	for _, cyclic := range []bool{false, true} {
		tg := &fuzzTarget{mem: seedImage(lib, cyclic)}
		p, err := threaddb.Open(100, []threaddb.Module{{Path: path}}, tg, tg)
		if err != nil {
			t.Fatal(err)
		}
		list, err := p.List()
		if cyclic {
			if err == nil || !strings.Contains(err.Error(), "cycle") {
				t.Errorf("cyclic list: %+v, %v; want a cycle error", list, err)
			}
			continue
		}
		if err != nil || len(list.Threads) != 2 || list.Threads[0].LWP != 100 || list.Threads[1].LWP != 101 {
			t.Fatalf("seed image: %+v, %v", list, err)
		}
		for _, th := range list.Threads {
			if m, err := p.MapLWP(th.LWP); err != nil || m != th {
				t.Errorf("MapLWP(%d) = %+v, %v; want %+v", th.LWP, m, err, th)
			}
			if m, err := p.MapPthread(th.Pthread); err != nil || m != th {
				t.Errorf("MapPthread(%#x) = %+v, %v; want %+v", th.Pthread, m, err, th)
			}
		}
		if _, err := p.MapPthread(list.Threads[0].Pthread + 8); err == nil {
			t.Errorf("MapPthread of an address inside a descriptor succeeded")
		}
	}
}

// FuzzThreadWalk runs every query of the package over fuzzed target memory: corrupt lists,
// pointers and counts must give errors, never a panic or a hang.
func FuzzThreadWalk(f *testing.F) {
	path, lib := fuzzLibrary(f)
	f.Add(seedImage(lib, false), uint32(0), uint64(1))
	f.Add(seedImage(lib, true), uint32(1), uint64(2))
	f.Add(make([]byte, 64), uint32(5), uint64(0))
	f.Fuzz(func(t *testing.T, mem []byte, key uint32, modid uint64) {
		tg := &fuzzTarget{mem: mem}
		p, err := threaddb.Open(100, []threaddb.Module{{Path: path}}, tg, tg)
		if err != nil {
			t.Fatal(err)
		}
		list, _ := p.List()
		p.Status()
		p.NThreads()
		threads := append(list.Threads, threaddb.Thread{LWP: 100}, threaddb.Thread{LWP: 101, Pthread: miniBss + 0x100})
		for _, th := range threads {
			p.MapLWP(th.LWP)
			p.MapPthread(th.Pthread)
			p.Specific(th, key)
			p.TLSBlock(th, modid)
			p.TLSAddress(th, threaddb.Module{Path: path}, 8)
		}
	})
}
