package threaddb

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A module read once is not parsed again for another process (another load bias): the
// library comes back with the new module, the same descriptors; a file that changed on disk
// (a rebuild: new modification time) is read again.
func TestReadModuleCache(t *testing.T) {
	b, err := os.ReadFile("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Fatalf("the host libc: %v", err)
	}
	path := filepath.Join(t.TempDir(), "libc.so.6")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	first, _, err := readModule(Module{Path: path, Bias: 0x1000}, true)
	if err != nil || first == nil {
		t.Fatalf("first read: %v, %v", first, err)
	}
	second, _, err := readModule(Module{Path: path, Bias: 0x2000}, true)
	if err != nil || second == nil {
		t.Fatalf("second read: %v, %v", second, err)
	}
	if second.Module.Bias != 0x2000 || first.Module.Bias != 0x1000 {
		t.Errorf("biases %#x and %#x, want 0x1000 and 0x2000", first.Module.Bias, second.Module.Bias)
	}
	if first.Version != second.Version || len(first.descs) != len(second.descs) || len(first.descs) == 0 {
		t.Errorf("cached library differs: %q/%d descs vs %q/%d", first.Version, len(first.descs), second.Version, len(second.descs))
	}
	key := func() moduleKey {
		st, _ := os.Stat(path)
		return moduleKey{size: st.Size(), modTime: st.ModTime().UnixNano()}
	}
	before := key()
	moduleCache.Lock()
	n := len(moduleCache.m)
	moduleCache.Unlock()
	// The file is replaced by one without a thread library: the cache must not answer for it.
	later := time.Now().Add(time.Hour)
	if err := os.WriteFile(path, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, later, later)
	if key() == before {
		t.Fatal("the file's identity did not change")
	}
	if _, _, err := readModule(Module{Path: path}, true); err == nil {
		t.Errorf("a replaced file was answered from the cache")
	}
	moduleCache.Lock()
	defer moduleCache.Unlock()
	if len(moduleCache.m) != n {
		t.Errorf("a failed read was cached")
	}
}
