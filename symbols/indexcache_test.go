package symbols

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// indexDigest prints what lookups see of a binary's index: counts, every function with its
// ranges, line and breakpoint locations, the source files, and the name tables.
func indexDigest(t *testing.T, b *Binary) string {
	t.Helper()
	var w strings.Builder
	st := b.Stats()
	fmt.Fprintf(&w, "units %d funcs %d globals %d dies %d main %s\n", st.CompileUnits, st.Functions, st.Globals, st.DIEs, b.mainFn)
	for _, f := range b.Functions() {
		ln, _ := b.LineForPC(f.Entry)
		locs, _ := b.FunctionBreakpoints(f.Name)
		fmt.Fprintf(&w, "func %s %s %#x %v ext=%v decl=%d lang=%s %s:%d bps=%d\n", f.Name, f.LinkageName, f.Entry,
			f.Ranges, f.External, f.DeclLine, f.Language(), ln.File, ln.Line, len(locs))
	}
	files := b.SourceFiles()
	sort.Strings(files)
	for _, f := range files {
		locs, _ := b.LineBreakpoints(f, 20)
		fmt.Fprintf(&w, "file %s line 20: %d locations\n", f, len(locs))
	}
	for _, table := range []map[string][]dieRef{b.globals, b.types, b.enumerators} {
		var names []string
		for n, refs := range table {
			var offs []string
			for _, r := range refs {
				offs = append(offs, fmt.Sprintf("%#x/%#x/%v", r.off, r.cu.off, r.ext))
			}
			sort.Strings(offs)
			names = append(names, n+" "+strings.Join(offs, ","))
		}
		sort.Strings(names)
		fmt.Fprintf(&w, "%s\n", strings.Join(names, "\n"))
	}
	var extra []string
	for o, n := range b.typeNames {
		extra = append(extra, fmt.Sprintf("type %#x %s", o, n))
	}
	for o, p := range b.declParent {
		extra = append(extra, fmt.Sprintf("parent %#x %#x", o, p))
	}
	for o, n := range b.declNames {
		extra = append(extra, fmt.Sprintf("decl %#x %s", o, n))
	}
	sort.Strings(extra)
	fmt.Fprintf(&w, "%s\n", strings.Join(extra, "\n"))
	return w.String()
}

func openCached(t *testing.T, path, dir string) *Binary {
	t.Helper()
	b, err := Open(path, &Options{IndexCacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestIndexCacheReused: the second open of a binary takes its index from the persistent cache
// (no DIE walk) and every lookup answers as with the index built from the DWARF; the entry is
// the user's own, mode 0600 in a directory of mode 0700.
func TestIndexCacheReused(t *testing.T) {
	for _, prog := range []struct{ name, path string }{
		{"cpp", ""}, // C++ in the executable: names in namespaces and classes
		{"libc", libcPath},
	} {
		t.Run(prog.name, func(t *testing.T) {
			path := prog.path
			if path == "" {
				path = buildProgram(t, prog.name, "-g", "-O2").exe
			}
			dir := filepath.Join(t.TempDir(), "cache")
			first := openCached(t, path, dir)
			if prog.name == "libc" && first.DebugPath == "" {
				t.Skip("no separate debug file for libc (libc6-dbg)")
			}
			if st := first.Stats(); st.IndexBuilds != 1 || st.IndexCached {
				t.Fatalf("first open: %+v, want the index built", st)
			}
			entry := indexStore{dir: dir}.entryPath(first.BuildIDString())
			for p, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, entry: 0o600} {
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode() != want {
					t.Errorf("%s: mode %v, want %v", p, st.Mode(), want)
				}
			}
			second := openCached(t, path, dir)
			if st := second.Stats(); st.IndexBuilds != 0 || !st.IndexCached {
				t.Fatalf("second open: %+v, want the cached index", st)
			}
			fresh, err := Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			if got, want := indexDigest(t, second), indexDigest(t, fresh); got != want {
				t.Errorf("cached index differs from the built one:\n%s", firstDiff(got, want))
			}
		})
	}
}

// firstDiff shows the first differing line of two digests.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n cached: %s\n built:  %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("%d lines vs %d", len(al), len(bl))
}

// TestIndexCacheDamaged: a truncated, corrupted, empty or foreign entry (another binary's) is
// ignored without an error, the index built from the DWARF, and the entry replaced by a good
// one that the next open uses.
func TestIndexCacheDamaged(t *testing.T) {
	exe := buildProgram(t, "c", "-g", "-O0").exe
	other := buildProgram(t, "crash", "-g", "-O0").exe
	dir := filepath.Join(t.TempDir(), "cache")
	want := indexDigest(t, openCached(t, exe, dir))
	id := openCached(t, exe, dir).BuildIDString()
	entry := indexStore{dir: dir}.entryPath(id)
	good, err := os.ReadFile(entry)
	if err != nil {
		t.Fatal(err)
	}
	otherBin := openCached(t, other, dir)
	foreign, err := os.ReadFile(indexStore{dir: dir}.entryPath(otherBin.BuildIDString()))
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x40
	for name, data := range map[string][]byte{
		"truncated": good[:len(good)/3],
		"flipped":   flipped,
		"empty":     nil,
		"garbage":   []byte(strings.Repeat("HPCDAPIX", 100)),
		"foreign":   foreign,
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(entry, data, 0o600); err != nil {
				t.Fatal(err)
			}
			b := openCached(t, exe, dir)
			if st := b.Stats(); st.IndexBuilds != 1 || st.IndexCached {
				t.Fatalf("open over a %s entry: %+v, want the index built", name, st)
			}
			if got := indexDigest(t, b); got != want {
				t.Errorf("index after a %s entry:\n%s", name, firstDiff(got, want))
			}
			if st := openCached(t, exe, dir).Stats(); !st.IndexCached {
				t.Errorf("the %s entry was not replaced by a good one: %+v", name, st)
			}
		})
	}
}

// TestIndexCacheUntrusted: an entry that another user owns, or that group or others may
// write, is never read (the index is built and the entry replaced by one of the user's own);
// a cache directory owned by another user is not used at all.
func TestIndexCacheUntrusted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	const nobody = 65534
	exe := buildProgram(t, "c", "-g", "-O0").exe
	dir := filepath.Join(t.TempDir(), "cache")
	id := openCached(t, exe, dir).BuildIDString()
	entry := indexStore{dir: dir}.entryPath(id)
	for name, spoil := range map[string]func() error{
		"other owner":     func() error { return os.Chown(entry, nobody, nobody) },
		"group writable":  func() error { return os.Chmod(entry, 0o620) },
		"others writable": func() error { return os.Chmod(entry, 0o602) },
		"a symlink": func() error {
			real := entry + ".real"
			if err := os.Rename(entry, real); err != nil {
				return err
			}
			return os.Symlink(real, entry)
		},
	} {
		t.Run(name, func(t *testing.T) {
			if st := openCached(t, exe, dir).Stats(); !st.IndexCached {
				t.Fatalf("the good entry was not used: %+v", st)
			}
			if err := spoil(); err != nil {
				t.Fatal(err)
			}
			if st := openCached(t, exe, dir).Stats(); st.IndexBuilds != 1 || st.IndexCached {
				t.Fatalf("an entry with %s was read: %+v", name, st)
			}
			st, err := os.Lstat(entry)
			if err != nil {
				t.Fatal(err)
			}
			if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != os.Geteuid() || st.Mode() != 0o600 {
				t.Errorf("the entry was not replaced by the user's own: uid %d mode %v", sys.Uid, st.Mode())
			}
		})
	}
	t.Run("directory of another user", func(t *testing.T) {
		foreignDir := filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(foreignDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(foreignDir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if st := openCached(t, exe, foreignDir).Stats(); st.IndexBuilds != 1 {
				t.Fatalf("open %d with a cache directory of another user: %+v", i+1, st)
			}
		}
		if ents, _ := os.ReadDir(foreignDir); len(ents) != 0 {
			t.Errorf("wrote %d files into another user's directory", len(ents))
		}
	})
}

// TestIndexCacheConcurrentWriters: processes' worth of opens writing one entry at once all
// succeed and leave one good entry and no temporary file.
func TestIndexCacheConcurrentWriters(t *testing.T) {
	exe := buildProgram(t, "c", "-g", "-O0").exe
	dir := filepath.Join(t.TempDir(), "cache")
	errs := make(chan error, 8)
	for i := 0; i < cap(errs); i++ {
		go func() {
			b, err := Open(exe, &Options{IndexCacheDir: dir})
			if err == nil {
				b.Close()
			}
			errs <- err
		}()
	}
	for i := 0; i < cap(errs); i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasSuffix(ents[0].Name(), ".idx") {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("cache directory holds %v, want one entry", names)
	}
	if st := openCached(t, exe, dir).Stats(); !st.IndexCached {
		t.Errorf("entry left by concurrent writers not used: %+v", st)
	}
}

// TestIndexCacheDir: the cache directory follows HPCDAP_SYMBOL_CACHE, then XDG_CACHE_HOME,
// then the home directory; "off" turns it off.
func TestIndexCacheDir(t *testing.T) {
	for _, c := range []struct{ env, xdg, home, want string }{
		{"", "/x/cache", "/home/u", "/x/cache/hpcdap/symbols"},
		{"", "", "/home/u", "/home/u/.cache/hpcdap/symbols"},
		{"", "relative", "/home/u", "/home/u/.cache/hpcdap/symbols"},
		{"/elsewhere", "/x/cache", "/home/u", "/elsewhere"},
		{"off", "/x/cache", "/home/u", ""},
		{"0", "/x/cache", "/home/u", ""},
	} {
		t.Setenv(IndexCacheEnv, c.env)
		t.Setenv("XDG_CACHE_HOME", c.xdg)
		t.Setenv("HOME", c.home)
		if got := DefaultIndexCacheDir(); got != c.want {
			t.Errorf("%s=%q XDG_CACHE_HOME=%q HOME=%q: %q, want %q", IndexCacheEnv, c.env, c.xdg, c.home, got, c.want)
		}
	}
}
