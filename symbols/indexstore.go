package symbols

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// IndexCacheEnv names the environment variable that controls the persistent index cache:
// "off" (or "0", "false", "no") turns it off, an absolute path puts it in that directory.
const IndexCacheEnv = "HPCDAP_SYMBOL_CACHE"

// DefaultIndexCacheDir returns where the persistent index cache lives for this user:
// $HPCDAP_SYMBOL_CACHE when it is an absolute path, else $XDG_CACHE_HOME/hpcdap/symbols, else
// ~/.cache/hpcdap/symbols; "" when the cache is turned off or no home is known.
func DefaultIndexCacheDir() string {
	switch v := os.Getenv(IndexCacheEnv); strings.ToLower(v) {
	case "off", "0", "false", "no":
		return ""
	default:
		if filepath.IsAbs(v) {
			return v
		}
	}
	if x := os.Getenv("XDG_CACHE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "hpcdap", "symbols")
	}
	home, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Join(home, ".cache", "hpcdap", "symbols")
}

// indexCacheLimit bounds the total size of the entries of one cache directory; the entries
// used least recently are removed past it.
const indexCacheLimit = 2 << 30

// indexStore is the persistent index cache: one file per build-id and format version in a
// directory of the user's own. Every failure of the cache (a directory or file owned by
// someone else or writable by others, a short or corrupt file, a full disk) is silent: the
// index is then built from the DWARF as if there were no cache.
type indexStore struct {
	dir string
}

// entryPath names the file holding the index of a build-id (hex).
func (s indexStore) entryPath(id string) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s.v%d.idx", id, indexFormatVersion))
}

// ready makes the directory (mode 0700) if needed and reports whether it can be trusted:
// a directory (not a link) owned by this user that no one else may write or read.
func (s indexStore) ready() bool {
	if s.dir == "" || !filepath.IsAbs(s.dir) {
		return false
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return false
	}
	st, err := os.Lstat(s.dir)
	if err != nil || !st.IsDir() {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || int(sys.Uid) != os.Geteuid() {
		return false
	}
	if st.Mode().Perm()&0o077 != 0 {
		// Ours, but open to others (made by hand, or a umask of 0): close it first.
		if os.Chmod(s.dir, 0o700) != nil {
			return false
		}
	}
	return true
}

// load returns the contents of a build-id's entry, or nil when there is none or it may not
// be trusted: not a regular file, not owned by this user, or writable by group or others.
func (s indexStore) load(id string) []byte {
	if !s.ready() {
		return nil
	}
	p := s.entryPath(id)
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !trustedEntry(st) || st.Size() > indexCacheLimit {
		return nil
	}
	data := make([]byte, st.Size())
	if n, err := f.ReadAt(data, 0); err != nil || n != len(data) {
		return nil
	}
	now := time.Now()
	os.Chtimes(p, now, now) // the entry was used: evicted last
	return data
}

// trustedEntry reports whether a cache file may be read: a regular file of this user's that
// only this user may write.
func trustedEntry(st os.FileInfo) bool {
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o022 != 0 {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}

// store writes a build-id's entry atomically: a temporary file of mode 0600 in the same
// directory, renamed over the entry, so that a reader sees the old file or the new one whole
// and concurrent writers of one entry each replace it with a complete copy.
func (s indexStore) store(id string, data []byte) {
	if !s.ready() {
		return
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-"+id+"-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), s.entryPath(id)) != nil {
		os.Remove(tmp.Name())
		return
	}
	s.evict(id)
}

// evict removes other format versions of the entry just written, temporary files a killed
// writer left behind, and the least recently used entries while the directory holds more
// than indexCacheLimit bytes.
func (s indexStore) evict(keep string) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	type entry struct {
		path string
		size int64
		used time.Time
	}
	var live []entry
	var total int64
	current := filepath.Base(s.entryPath(keep))
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".tmp-"):
			if time.Since(info.ModTime()) > time.Hour {
				os.Remove(p)
			}
			continue
		case strings.HasPrefix(e.Name(), keep+".v") && e.Name() != current:
			os.Remove(p)
			continue
		case !strings.HasSuffix(e.Name(), ".idx"):
			continue
		}
		live = append(live, entry{p, info.Size(), info.ModTime()})
		total += info.Size()
	}
	sort.Slice(live, func(i, j int) bool { return live[i].used.Before(live[j].used) })
	for _, e := range live {
		if total <= indexCacheLimit || filepath.Base(e.path) == current {
			continue
		}
		if os.Remove(e.path) == nil {
			total -= e.size
		}
	}
}
