package symbols

import (
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
)

// Cache shares Binaries: each distinct build-id (or, without one, each distinct file) is read
// and indexed once however many processes run it. It is safe for concurrent use; concurrent
// opens of one binary wait for a single load.
type Cache struct {
	opts   *Options
	mu     sync.Mutex
	byID   map[string]*cacheEntry
	byFile map[fileKey]*cacheEntry
}

type cacheEntry struct {
	once   sync.Once
	bin    *Binary
	err    error
	loaded atomic.Bool // bin and err are set
}

// fileKey identifies a file on disk independent of the path used to reach it.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

// NewCache returns an empty cache; opts apply to every binary it opens.
func NewCache(opts *Options) *Cache {
	return &Cache{opts: opts, byID: map[string]*cacheEntry{}, byFile: map[fileKey]*cacheEntry{}}
}

// Open returns the Binary for path, reading it only if no binary with the same build-id (or
// the same file) was opened before.
func (c *Cache) Open(path string) (*Binary, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("symbols: open %s: %w", path, err)
	}
	key := fileKey{size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		key.dev, key.ino = uint64(sys.Dev), sys.Ino
	}
	c.mu.Lock()
	e := c.byFile[key]
	c.mu.Unlock()
	if e == nil {
		id, err := readBuildID(path)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if id != "" {
			e = c.byID[id]
		}
		if e == nil {
			e = &cacheEntry{}
			if id != "" {
				c.byID[id] = e
			}
		}
		c.byFile[key] = e
		c.mu.Unlock()
	}
	e.once.Do(func() {
		e.bin, e.err = Open(path, c.opts)
		e.loaded.Store(true)
	})
	return e.bin, e.err
}

// OpenBuildID returns the Binary with a build-id (hex), from the cache or from the debug
// directories' .build-id trees.
func (c *Cache) OpenBuildID(id string) (*Binary, error) {
	if _, err := hex.DecodeString(id); err != nil || len(id) < 4 {
		return nil, fmt.Errorf("symbols: build-id %q: not a hex string", id)
	}
	c.mu.Lock()
	e := c.byID[id]
	c.mu.Unlock()
	if e != nil {
		e.once.Do(func() {}) // a concurrent Open is loading it
		if e.bin != nil || e.err != nil {
			return e.bin, e.err
		}
	}
	dirs := DefaultDebugDirs
	if c.opts != nil && c.opts.DebugDirs != nil {
		dirs = c.opts.DebugDirs
	}
	for _, d := range dirs {
		for _, suffix := range []string{"", ".debug"} {
			p := filepath.Join(d, ".build-id", id[:2], id[2:]+suffix)
			if fileExists(p) {
				return c.Open(p)
			}
		}
	}
	return nil, fmt.Errorf("symbols: build-id %s: not found under %v", id, dirs)
}

// readBuildID returns the hex build-id of an ELF file, "" when it has none.
func readBuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("symbols: open %s: %w", path, err)
	}
	defer f.Close()
	return hex.EncodeToString(buildID(f)), nil
}

// BuildIDString returns the build-id as lower-case hex ("" when absent).
func (b *Binary) BuildIDString() string { return hex.EncodeToString(b.BuildID) }
