package symbols

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// sectionData returns the contents of the named section, decompressed when it is compressed
// either the modern way (SHF_COMPRESSED, handled by debug/elf) or the legacy ".zdebug" way.
// A missing or NOBITS section gives nil and no error.
func sectionData(f *elf.File, name string) ([]byte, error) {
	if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
		b, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("read section %s: %w", name, err)
		}
		return b, nil
	}
	if strings.HasPrefix(name, ".debug_") {
		z := ".zdebug_" + name[len(".debug_"):]
		if s := f.Section(z); s != nil && s.Type != elf.SHT_NOBITS {
			b, err := s.Data()
			if err != nil {
				return nil, fmt.Errorf("read section %s: %w", z, err)
			}
			return unzdebug(z, b)
		}
	}
	return nil, nil
}

// unzdebug inflates a legacy .zdebug section: "ZLIB", an 8-byte big-endian size, zlib data.
func unzdebug(name string, b []byte) ([]byte, error) {
	if len(b) < 12 || string(b[:4]) != "ZLIB" {
		return b, nil
	}
	n := binary.BigEndian.Uint64(b[4:12])
	if n > 1<<32 {
		return nil, fmt.Errorf("section %s: implausible uncompressed size %d", name, n)
	}
	r, err := zlib.NewReader(bytes.NewReader(b[12:]))
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", name, err)
	}
	out := make([]byte, n)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, fmt.Errorf("section %s: inflate: %w", name, err)
	}
	return out, nil
}

// hasDWARF reports whether f carries its own .debug_info.
func hasDWARF(f *elf.File) bool {
	for _, n := range []string{".debug_info", ".zdebug_info"} {
		if s := f.Section(n); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			return true
		}
	}
	return false
}

// buildIDAddr is the link-time address of the build-id's bytes in the loaded image: false
// when the binary has none, or not in an allocated note section.
func (b *Binary) buildIDAddr() (uint64, bool) {
	if len(b.BuildID) == 0 || b.file == nil {
		return 0, false
	}
	for _, s := range b.file.Sections {
		if s.Type != elf.SHT_NOTE || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if data, err := s.Data(); err == nil {
			if i := bytes.Index(data, b.BuildID); i >= 0 {
				return s.Addr + uint64(i), true
			}
		}
	}
	return 0, false
}

// buildID returns the GNU build-id note of f, or nil.
func buildID(f *elf.File) []byte {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		if id := findNote(b, f.ByteOrder, "GNU", 3); id != nil {
			return id
		}
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		// Filesz is the file's word, not a bound: read what the file really holds, and no more
		// than a note segment can sensibly be.
		b, err := io.ReadAll(io.LimitReader(p.Open(), maxNoteSegment))
		if err != nil {
			continue
		}
		if id := findNote(b, f.ByteOrder, "GNU", 3); id != nil {
			return id
		}
	}
	return nil
}

// maxNoteSegment bounds what buildID reads of one PT_NOTE segment.
const maxNoteSegment = 1 << 20

// elfNote is one entry of an ELF note section or segment.
type elfNote struct {
	Name string
	Type uint32
	Desc []byte
}

// parseNotes splits note data into entries; malformed tails are ignored.
func parseNotes(b []byte, order binary.ByteOrder) []elfNote {
	var out []elfNote
	for len(b) >= 12 {
		nsz, dsz, typ := order.Uint32(b), order.Uint32(b[4:]), order.Uint32(b[8:])
		b = b[12:]
		na := int(align4(uint64(nsz)))
		da := int(align4(uint64(dsz)))
		if uint64(nsz) > uint64(len(b)) || na > len(b) {
			break
		}
		name := string(bytes.TrimRight(b[:nsz], "\x00"))
		b = b[na:]
		if uint64(dsz) > uint64(len(b)) {
			break
		}
		desc := b[:dsz]
		if da > len(b) {
			da = len(b)
		}
		b = b[da:]
		out = append(out, elfNote{Name: name, Type: typ, Desc: desc})
	}
	return out
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

func findNote(b []byte, order binary.ByteOrder, name string, typ uint32) []byte {
	for _, n := range parseNotes(b, order) {
		if n.Name == name && n.Type == typ {
			return append([]byte(nil), n.Desc...)
		}
	}
	return nil
}

// debugLink returns the file name and CRC of f's .gnu_debuglink section.
func debugLink(f *elf.File) (string, uint32, bool) {
	s := f.Section(".gnu_debuglink")
	if s == nil {
		return "", 0, false
	}
	b, err := s.Data()
	if err != nil {
		return "", 0, false
	}
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return "", 0, false
	}
	name := string(b[:i])
	off := int(align4(uint64(i + 1)))
	var crc uint32
	if off+4 <= len(b) {
		crc = f.ByteOrder.Uint32(b[off:])
	}
	return name, crc, true
}

// findDebugFile looks for the separate debug file of an object the way gdb does: by build-id
// under each debug directory (.build-id/xx/yyyy.debug), then by .gnu_debuglink name next to
// the object, in its .debug subdirectory, and under each debug directory plus the object's
// directory.
func findDebugFile(path string, f *elf.File, id []byte, dirs []string) string {
	if len(id) >= 2 {
		h := fmt.Sprintf("%x", id)
		for _, d := range dirs {
			p := filepath.Join(d, ".build-id", h[:2], h[2:]+".debug")
			if fileExists(p) {
				return p
			}
		}
	}
	name, _, ok := debugLink(f)
	if !ok {
		return ""
	}
	dir := filepath.Dir(path)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	cands := []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name)}
	for _, d := range dirs {
		cands = append(cands, filepath.Join(d, dir, name))
	}
	self, _ := filepath.Abs(path)
	for _, c := range cands {
		if c != self && fileExists(c) {
			return c
		}
	}
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
