package testenv

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ELFSymbols returns the symbol table of the ELF file path, read with debug/elf (link-time
// values and sizes), failing the test when the file has none.
func ELFSymbols(t testing.TB, path string) []elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("%s: symbols: %v", path, err)
	}
	return syms
}

// ELFSymbol returns the first symbol called name in the symbol table of the ELF file path,
// failing the test when there is none.
func ELFSymbol(t testing.TB, path, name string) elf.Symbol {
	t.Helper()
	for _, s := range ELFSymbols(t, path) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return elf.Symbol{}
}

// ELFEntry returns the entry point (e_entry) of the ELF file path, a link-time address.
func ELFEntry(t testing.TB, path string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Entry
}

// ELFBytes returns n bytes of the ELF file path at link-time address addr, from the section
// that holds them: what the program's memory holds there before it runs.
func ELFBytes(t testing.TB, path string, addr uint64, n int) []byte {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type == elf.SHT_PROGBITS && addr >= s.Addr && addr+uint64(n) <= s.Addr+s.Size {
			b := make([]byte, n)
			if _, err := s.ReadAt(b, int64(addr-s.Addr)); err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("%s: no section holds %#x", path, addr)
	return nil
}

// nmKey identifies one nm run: the file as it is now and nm's options.
type nmKey struct {
	path, args string
	size       int64
	mtime      time.Time
}

var nmCache sync.Map // nmKey → map[string]uint64

// NM runs nm with args on the file path and returns each symbol's value by name (the first
// when a name repeats): binutils' view of the symbol table, an oracle independent of the code
// under test. The result is cached while the file is unchanged, so that tests may call it
// often; callers must not modify the map.
func NM(path string, args ...string) (map[string]uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("nm: %w", err)
	}
	key := nmKey{path: path, args: strings.Join(args, "\x00"), size: fi.Size(), mtime: fi.ModTime()}
	if v, ok := nmCache.Load(key); ok {
		return v.(map[string]uint64), nil
	}
	nm, err := exec.LookPath("nm")
	if err != nil {
		return nil, fmt.Errorf("nm not found: install the Debian package binutils")
	}
	out, err := exec.Command(nm, append(append([]string(nil), args...), path)...).Output()
	if err != nil {
		return nil, fmt.Errorf("nm %s: %v", path, err)
	}
	syms := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		if _, dup := syms[f[2]]; dup {
			continue
		}
		if v, err := strconv.ParseUint(f[0], 16, 64); err == nil {
			syms[f[2]] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("nm %s: %v", path, err)
	}
	nmCache.Store(key, syms)
	return syms, nil
}

// NMSymbols is NM for a test: it fails the test when nm cannot run.
func NMSymbols(t testing.TB, path string, args ...string) map[string]uint64 {
	t.Helper()
	syms, err := NM(path, args...)
	if err != nil {
		t.Fatal(err)
	}
	return syms
}

// NMSymbol returns the value nm gives the symbol name of the file path, failing the test when
// nm cannot run or lists no such symbol.
func NMSymbol(t testing.TB, path, name string) uint64 {
	t.Helper()
	v, ok := NMSymbols(t, path)[name]
	if !ok {
		t.Fatalf("nm %s: no symbol %s", path, name)
	}
	return v
}
