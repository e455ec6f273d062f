package launch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// LDCache is the dynamic linker's cache of library locations (/etc/ld.so.cache, written by
// ldconfig): library name → path, for this machine's architecture.
type LDCache struct {
	entries []ldCacheEntry
}

type ldCacheEntry struct {
	flags int32
	name  string
	path  string
	hwcap uint64
}

// Flags of glibc's cache entries (sysdeps/generic/ldconfig.h).
const (
	ldFlagTypeMask  = 0x00ff
	ldFlagELFLibc6  = 0x0003
	ldFlagArchMask  = 0xff00
	ldFlagX8664     = 0x0300
	ldFlagAArch64   = 0x0a00
	ldFlagPowerPC64 = 0x0500
)

const (
	ldCacheNewMagic = "glibc-ld.so.cache1.1"
	ldCacheOldMagic = "ld.so-1.7.0"
	ldNewHeader     = 48 // magic 17 + version 3 + nlibs 4 + len_strings 4 + flags 1 + pad 3 + ext 4 + unused 12
	ldNewEntry      = 24 // flags 4, key 4, value 4, osversion 4, hwcap 8
	ldOldHeader     = 16 // magic 11 + pad 1 + nlibs 4
	ldOldEntry      = 12 // flags 4, key 4, value 4

	maxLDCacheString = 4096 // PATH_MAX
)

// ErrLDCacheFormat means a cache file is not in a format this package reads.
var ErrLDCacheFormat = errors.New("not an ld.so.cache")

// ReadLDCache reads and parses a cache file.
func ReadLDCache(path string) (*LDCache, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("launch: read %s: %w", path, err)
	}
	c, err := ParseLDCache(b)
	if err != nil {
		return nil, fmt.Errorf("launch: parse %s: %w", path, err)
	}
	return c, nil
}

// ParseLDCache parses the bytes of an ld.so.cache: the new format ("glibc-ld.so.cache1.1",
// string offsets relative to its header), alone or after an old-format table
// ("ld.so-1.7.0"), as glibc's dl-cache.c reads them. Only little-endian caches are read.
func ParseLDCache(b []byte) (*LDCache, error) {
	newAt := 0
	if bytes.HasPrefix(b, []byte(ldCacheOldMagic)) {
		if len(b) < ldOldHeader {
			return nil, fmt.Errorf("%w: old header truncated", ErrLDCacheFormat)
		}
		n := binary.LittleEndian.Uint32(b[12:])
		end := uint64(ldOldHeader) + uint64(n)*ldOldEntry
		if end > uint64(len(b)) {
			return nil, fmt.Errorf("%w: %d old entries past the end", ErrLDCacheFormat, n)
		}
		// The new table follows, aligned to 8 bytes.
		newAt = int((end + 7) &^ 7)
	}
	if newAt > len(b) || !bytes.HasPrefix(b[newAt:], []byte(ldCacheNewMagic)) {
		return nil, fmt.Errorf("%w: no %q table", ErrLDCacheFormat, ldCacheNewMagic)
	}
	h := b[newAt:]
	if len(h) < ldNewHeader {
		return nil, fmt.Errorf("%w: header truncated", ErrLDCacheFormat)
	}
	if h[28] == 1 { // cache_file_new.flags: 1 big-endian, 2 little-endian, 0 unknown (old ldconfig)
		return nil, fmt.Errorf("%w: big-endian cache", ErrLDCacheFormat)
	}
	n := binary.LittleEndian.Uint32(h[20:])
	if uint64(ldNewHeader)+uint64(n)*ldNewEntry > uint64(len(h)) {
		return nil, fmt.Errorf("%w: %d entries past the end", ErrLDCacheFormat, n)
	}
	str := func(off uint32) (string, error) {
		if uint64(off) >= uint64(len(h)) {
			return "", fmt.Errorf("%w: string offset %d past the end", ErrLDCacheFormat, off)
		}
		s := h[off:]
		// Library names and paths are short: bounding the scan keeps a hostile file from
		// costing entries × size.
		i := bytes.IndexByte(s[:min(len(s), maxLDCacheString)], 0)
		if i < 0 {
			return "", fmt.Errorf("%w: unterminated or overlong string at %d", ErrLDCacheFormat, off)
		}
		return string(s[:i]), nil
	}
	c := &LDCache{entries: make([]ldCacheEntry, 0, n)}
	for i := range int(n) {
		e := h[ldNewHeader+i*ldNewEntry:]
		name, err := str(binary.LittleEndian.Uint32(e[4:]))
		if err != nil {
			return nil, err
		}
		path, err := str(binary.LittleEndian.Uint32(e[8:]))
		if err != nil {
			return nil, err
		}
		c.entries = append(c.entries, ldCacheEntry{flags: int32(binary.LittleEndian.Uint32(e)), name: name,
			path: path, hwcap: binary.LittleEndian.Uint64(e[16:])})
	}
	return c, nil
}

// Len is the number of entries.
func (c *LDCache) Len() int { return len(c.entries) }

// Lookup returns the path the cache gives for a library name and an architecture flag (the
// 0xff00 bits of an entry: ldFlagX8664 for x86-64), preferring entries without a hwcap
// subdirectory as the loader does when it has no better one.
func (c *LDCache) Lookup(name string, arch int32) (string, bool) {
	best := ""
	for _, e := range c.entries {
		if e.name != name || e.flags&ldFlagTypeMask != ldFlagELFLibc6 || e.flags&ldFlagArchMask != arch {
			continue
		}
		if e.hwcap == 0 {
			return e.path, true
		}
		if best == "" {
			best = e.path
		}
	}
	return best, best != ""
}
