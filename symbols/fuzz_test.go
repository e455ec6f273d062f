package symbols

import (
	"debug/elf"
	"encoding/binary"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// fuzzSeedBinary compiles the C test program into dir and returns its bytes (a real ELF file
// with DWARF 5 for the seed corpus).
func fuzzSeedBinary(f *testing.F, flags ...string) []byte {
	f.Helper()
	dir := f.TempDir()
	exe := filepath.Join(dir, "seed")
	args := append(append([]string{}, flags...), "-o", exe, "testdata/crash/crash.c")
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		f.Fatalf("gcc: %v\n%s", err, out)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// FuzzOpen opens arbitrary bytes as an ELF object with debugging information and exercises
// the lookups on whatever it finds; malformed input must give errors, never panics.
func FuzzOpen(f *testing.F) {
	f.Add(fuzzSeedBinary(f, "-g", "-O0"))
	f.Add(fuzzSeedBinary(f, "-g", "-O2", "-gdwarf-4"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "in")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		// A hang is a failure too: report where it is stuck.
		done := make(chan struct{})
		go func() {
			defer close(done)
			exerciseBinary(p)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			buf := make([]byte, 1<<20)
			panic("hang:\n" + string(buf[:runtime.Stack(buf, true)]))
		}
	})
}

// exerciseBinary opens a file and runs the lookups an adapter would.
func exerciseBinary(p string) {
	{
		b, err := Open(p, &Options{DebugDirs: []string{}})
		if err != nil {
			return
		}
		defer b.Close()
		for _, fn := range b.Functions() {
			b.LineForPC(fn.Entry)
			b.InlineChain(fn.Entry)
			b.FunctionBreakpoints(fn.Name)
			if root, err := fn.scopeTree(); err == nil {
				for _, v := range root.vars {
					b.declType(v.off)
				}
			}
		}
		for _, file := range b.SourceFiles() {
			b.LineBreakpoints(file, 10)
		}
		for name := range b.globals {
			refs := b.globals[name]
			b.declType(refs[0].off)
		}
	}
}

// FuzzCoreNotes decodes arbitrary note data as a core file's notes (NT_PRSTATUS, NT_FILE,
// NT_AUXV) for both byte orders.
func FuzzCoreNotes(f *testing.F) {
	// Seed: the notes of a real core, written by gdb for a stopped test program.
	f.Add(realCoreNotes(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			for _, m := range []elf.Machine{elf.EM_X86_64, elf.EM_PPC64} {
				arch, _ := ArchFor(m, order)
				c := &Core{Arch: arch, Auxv: map[uint64]uint64{}}
				_ = c.parseNotes(data, &elf.File{FileHeader: elf.FileHeader{ByteOrder: order}})
			}
		}
	})
}

// realCoreNotes returns the note segment of a core dumped by gdb for the C test program.
func realCoreNotes(f *testing.F) []byte {
	f.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		f.Fatal("required tool gdb not found in PATH")
	}
	dir := f.TempDir()
	exe := filepath.Join(dir, "prog")
	if out, err := exec.Command("gcc", "-g", "-o", exe, "testdata/crash/crash.c").CombinedOutput(); err != nil {
		f.Fatalf("gcc: %v\n%s", err, out)
	}
	core := filepath.Join(dir, "core")
	cmd := exec.Command("gdb", "-batch", "-nx", "-ex", "break leaf", "-ex", "run", "-ex", "generate-core-file "+core, exe)
	if out, err := cmd.CombinedOutput(); err != nil {
		f.Fatalf("gdb: %v\n%s", err, out)
	}
	ef, err := elf.Open(core)
	if err != nil {
		f.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_NOTE {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				return b
			}
		}
	}
	f.Fatal("core has no notes")
	return nil
}

// FuzzParseExpr parses arbitrary expressions in C and Fortran syntax.
func FuzzParseExpr(f *testing.F) {
	for _, s := range []string{"e->matrix[1][2]", "(char)e->i", "*argv@argc", "a(2:3, :)", "p%x + p%y",
		"flag .and. k > 3", "sizeof(struct node)", "g_counter == 42 || argc < 0", "x = y += 3", "$pc", "'\\n'",
		"geo::Shape::count", "1.5e3 ** 2", "c ? a : b"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, fortran bool) {
		parseExpr(s, fortran, func(string) bool { return false })
	})
}

// FuzzDemangle decodes arbitrary symbol names; the demangler must terminate and not panic.
func FuzzDemangle(f *testing.F) {
	for _, s := range []string{"_ZTVN3geo6CircleE", "_ZNK3geo6Circle4areaEv", "_ZN3geo5maxOfIdEET_S1_S1_",
		"_ZNSt6vectorIiSaIiEE9push_backERKi", "_ZZ4mainE5local", "_ZN3geo3BoxIiLi3EE3getEi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { demangle(s) })
}

// FuzzIndexCache decodes arbitrary bytes as the body of a persistent index cache entry (the
// header and checksum made valid, so that the fuzzer reaches the decoder) and restores what
// decodes into a binary, as an open with a damaged or hostile entry would: errors, never
// panics or huge allocations.
func FuzzIndexCache(f *testing.F) {
	dir := f.TempDir()
	exe := filepath.Join(dir, "seed")
	if err := os.WriteFile(exe, fuzzSeedBinary(f, "-g", "-O2"), 0o755); err != nil {
		f.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	b, err := Open(exe, &Options{IndexCacheDir: cache})
	if err != nil {
		f.Fatal(err)
	}
	seed := indexStore{dir: cache}.load(b.BuildIDString())
	if seed == nil {
		f.Fatal("no cache entry written for the seed binary")
	}
	b.Close()
	const head = len(indexMagic) + 16
	f.Add(seed[head:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		data := make([]byte, head, head+len(body))
		copy(data, indexMagic)
		binary.LittleEndian.PutUint32(data[len(indexMagic):], indexFormatVersion)
		binary.LittleEndian.PutUint32(data[len(indexMagic)+4:], crc32.Checksum(body, crcTable))
		binary.LittleEndian.PutUint64(data[len(indexMagic)+8:], uint64(len(body)))
		snap, err := decodeIndex(append(data, body...))
		if err != nil {
			return
		}
		bin, err := Open(exe, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer bin.Close()
		if bin.restoreIndex(snap.scans) == nil {
			for _, fn := range bin.Functions() {
				bin.LineForPC(fn.Entry)
				bin.FunctionBreakpoints(fn.Name)
			}
			for _, file := range bin.SourceFiles() {
				bin.LineBreakpoints(file, 10)
			}
		}
	})
}
