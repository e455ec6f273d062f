package symbols

import (
	"bytes"
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"unsafe"
)

// indexFormatVersion is the version of the persistent index format; it names the cache
// files, so that a changed format never reads an old file.
const indexFormatVersion = 1

// indexMagic starts every cache file.
const indexMagic = "HPCDAPIX"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// indexSnapshot is what the persistent cache keeps of an indexed binary: which DWARF file it
// was built from (build-id and the section headers, to tell a foreign or stale file), the
// decompressed contents of its compressed DWARF sections, and every compile unit's index.
type indexSnapshot struct {
	buildID  []byte
	layout   []sectionFact
	sections map[string][]byte
	scans    []*cuScan
	units    []byte // the encoded units, until decodeScans
}

// sectionFact identifies one DWARF section as the file holds it.
type sectionFact struct {
	name     string // the name in the file (.debug_info, or .zdebug_info)
	offset   uint64
	fileSize uint64
	flags    uint64
}

// encodeIndex serialises a snapshot: the magic, the format version, the length and CRC-32C
// of the body, then the body.
func encodeIndex(s *indexSnapshot) []byte {
	const head = len(indexMagic) + 16
	var w encoder
	size := head + 64*len(s.scans)
	for _, d := range s.sections {
		size += len(d) + 16
	}
	for _, r := range s.scans {
		size += 64 * (len(r.funcs) + len(r.globals) + len(r.types) + len(r.declNames))
	}
	w.buf.Grow(size)
	w.buf.Write(make([]byte, head)) // filled in below
	w.bytes(s.buildID)
	w.uint(uint64(len(s.layout)))
	for _, f := range s.layout {
		w.str(f.name)
		w.uint(f.offset)
		w.uint(f.fileSize)
		w.uint(f.flags)
	}
	w.uint(uint64(len(s.sections)))
	for _, f := range s.layout { // in layout order: the output is deterministic
		if d, ok := s.sections[f.name]; ok {
			w.str(f.name)
			w.bytes(d)
		}
	}
	w.uint(uint64(len(s.scans)))
	for _, r := range s.scans {
		encodeScan(&w, r)
	}
	out := w.buf.Bytes()
	body := out[head:]
	copy(out, indexMagic)
	binary.LittleEndian.PutUint32(out[len(indexMagic):], indexFormatVersion)
	binary.LittleEndian.PutUint32(out[len(indexMagic)+4:], crc32.Checksum(body, crcTable))
	binary.LittleEndian.PutUint64(out[len(indexMagic)+8:], uint64(len(body)))
	return out
}

func encodeScan(w *encoder, r *cuScan) {
	cu := r.cu
	w.uint(cu.unitOff)
	w.uint(uint64(cu.off))
	w.str(cu.Name)
	w.str(cu.CompDir)
	w.str(cu.Producer)
	w.uint(uint64(cu.Lang))
	w.uint(uint64(cu.Version))
	w.uint(uint64(cu.AddrSize))
	w.bool(cu.is64)
	w.uint(cu.lowPC)
	w.uint(cu.addrBase)
	w.uint(cu.locBase)
	w.uint(uint64(r.dies))
	w.ranges(r.cuRanges)
	w.uint(uint64(len(r.funcs)))
	for _, f := range r.funcs {
		w.str(f.Name)
		w.str(f.LinkageName)
		w.uint(f.Entry)
		w.uint(f.Low)
		w.uint(f.High)
		w.ranges(f.Ranges)
		w.bool(f.External)
		w.uint(uint64(f.DeclLine))
		w.uint(uint64(f.off))
		w.uint(uint64(f.spec))
		w.uint(uint64(f.origin))
		w.bool(f.isMain)
	}
	w.uint(uint64(len(r.globals)))
	for _, g := range r.globals {
		w.str(g.name)
		w.uint(uint64(g.spec))
		w.uint(uint64(g.off))
		w.bool(g.ext)
	}
	for _, list := range [][]typeDecl{r.types, r.enumerators, r.typeQual} {
		w.uint(uint64(len(list)))
		for _, t := range list {
			w.str(t.name)
			w.uint(uint64(t.off))
		}
	}
	w.uint(uint64(len(r.declParent)))
	for _, d := range r.declParent {
		w.uint(uint64(d[0]))
		w.uint(uint64(d[1]))
	}
	w.uint(uint64(len(r.declNames)))
	for off, n := range r.declNames {
		w.uint(uint64(off))
		w.str(n)
	}
	w.uint(uint64(len(r.declExt)))
	for _, o := range r.declExt {
		w.uint(uint64(o))
	}
	w.uint(uint64(len(cu.files)))
	for _, f := range cu.files {
		w.str(f)
	}
}

// decodeIndex reads a snapshot written by encodeIndex; its strings and sections share data's
// memory, which must not change afterwards. Any damage (a short file, a bad checksum, another
// format version, counts or lengths beyond the data) is an error; the compile units it
// returns have no Binary yet.
func decodeIndex(data []byte) (*indexSnapshot, error) {
	s, err := decodeIndexHead(data)
	if err != nil {
		return nil, err
	}
	if err := s.decodeScans(); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeIndexHead checks a snapshot's header and checksum and reads what identifies the file
// and the cached sections, leaving the units for decodeScans (which may run beside the
// opening of the DWARF those sections hold).
func decodeIndexHead(data []byte) (*indexSnapshot, error) {
	const head = len(indexMagic) + 16
	if len(data) < head || string(data[:len(indexMagic)]) != indexMagic {
		return nil, errors.New("index cache: not an index file")
	}
	p := data[len(indexMagic):]
	if v := binary.LittleEndian.Uint32(p); v != indexFormatVersion {
		return nil, fmt.Errorf("index cache: format version %d, want %d", v, indexFormatVersion)
	}
	sum := binary.LittleEndian.Uint32(p[4:])
	n := binary.LittleEndian.Uint64(p[8:])
	body := data[head:]
	if n != uint64(len(body)) {
		return nil, fmt.Errorf("index cache: body of %d bytes, header says %d", len(body), n)
	}
	if crc32.Checksum(body, crcTable) != sum {
		return nil, errors.New("index cache: checksum mismatch")
	}
	r := decoder{b: body}
	s := &indexSnapshot{buildID: r.bytes(), sections: map[string][]byte{}}
	for i, n := 0, r.count(4); i < n; i++ {
		s.layout = append(s.layout, sectionFact{name: r.str(), offset: r.uint(), fileSize: r.uint(), flags: r.uint()})
	}
	for i, n := 0, r.count(2); i < n; i++ {
		name := r.str()
		s.sections[name] = r.bytes()
	}
	if r.err != nil {
		return nil, fmt.Errorf("index cache: %w", r.err)
	}
	s.units = r.b
	return s, nil
}

// decodeScans reads the compile units' index that decodeIndexHead left.
func (s *indexSnapshot) decodeScans() error {
	r := decoder{b: s.units}
	for i, n := 0, r.count(20); i < n && r.err == nil; i++ {
		s.scans = append(s.scans, decodeScan(&r))
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the last unit", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("index cache: %w", r.err)
	}
	return nil
}

func decodeScan(r *decoder) *cuScan {
	cu := &compUnit{unitOff: r.uint(), off: r.offset(), Name: r.str(), CompDir: r.str(), Producer: r.str(),
		Lang: Language(r.uint()), Version: int(r.uint()), AddrSize: int(r.uint()), is64: r.bool(),
		lowPC: r.uint(), addrBase: r.uint(), locBase: r.uint()}
	res := &cuScan{cu: cu, dies: int(r.uint()), cuRanges: r.ranges()}
	for i, n := 0, r.count(12); i < n; i++ {
		f := &Function{Name: r.str(), LinkageName: r.str(), Entry: r.uint(), Low: r.uint(), High: r.uint(),
			Ranges: r.ranges(), External: r.bool(), DeclLine: int(r.uint()), off: r.offset(), spec: r.offset(),
			origin: r.offset(), isMain: r.bool(), cu: cu}
		res.funcs = append(res.funcs, f)
	}
	for i, n := 0, r.count(4); i < n; i++ {
		res.globals = append(res.globals, globalDecl{name: r.str(), spec: r.offset(), off: r.offset(), ext: r.bool()})
	}
	for _, list := range []*[]typeDecl{&res.types, &res.enumerators, &res.typeQual} {
		for i, n := 0, r.count(2); i < n; i++ {
			*list = append(*list, typeDecl{name: r.str(), off: r.offset()})
		}
	}
	for i, n := 0, r.count(2); i < n; i++ {
		res.declParent = append(res.declParent, [2]dwarf.Offset{r.offset(), r.offset()})
	}
	n := r.count(2)
	res.declNames = make(map[dwarf.Offset]string, n)
	for i := 0; i < n; i++ {
		off := r.offset()
		res.declNames[off] = r.str()
	}
	for i, n := 0, r.count(1); i < n; i++ {
		res.declExt = append(res.declExt, r.offset())
	}
	for i, n := 0, r.count(1); i < n; i++ {
		cu.files = append(cu.files, r.str())
	}
	return res
}

// encoder appends unsigned LEB128 numbers and length-prefixed byte strings.
type encoder struct{ buf bytes.Buffer }

func (w *encoder) uint(v uint64) {
	var tmp [binary.MaxVarintLen64]byte
	w.buf.Write(tmp[:binary.PutUvarint(tmp[:], v)])
}

func (w *encoder) bool(v bool) {
	if v {
		w.buf.WriteByte(1)
	} else {
		w.buf.WriteByte(0)
	}
}

func (w *encoder) str(s string) {
	w.uint(uint64(len(s)))
	w.buf.WriteString(s)
}

func (w *encoder) bytes(b []byte) {
	w.uint(uint64(len(b)))
	w.buf.Write(b)
}

func (w *encoder) ranges(rg [][2]uint64) {
	w.uint(uint64(len(rg)))
	for _, r := range rg {
		w.uint(r[0])
		w.uint(r[1])
	}
}

// decoder reads what encoder wrote. The first error sticks: later reads return zero values,
// so a decode runs to its end and reports it once.
type decoder struct {
	b   []byte
	err error
}

func (r *decoder) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
	r.b = nil
}

func (r *decoder) uint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad or truncated number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// offset reads a DIE offset; it must fit the type.
func (r *decoder) offset() dwarf.Offset {
	v := r.uint()
	if v > 1<<40 {
		r.fail("offset %#x out of range", v)
		return 0
	}
	return dwarf.Offset(v)
}

func (r *decoder) bool() bool {
	switch v := r.uint(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		r.fail("bad flag %d", v)
		return false
	}
}

// count reads the length of a list whose elements take at least min bytes each, refusing one
// the remaining data cannot hold (so that damage never makes a huge allocation).
func (r *decoder) count(min int) int {
	v := r.uint()
	if v > uint64(len(r.b)/min) {
		r.fail("count %d exceeds the data", v)
		return 0
	}
	return int(v)
}

func (r *decoder) bytes() []byte {
	n := r.count(1)
	if r.err != nil {
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

// str returns a string that shares the decoded data's memory (an index holds hundreds of
// thousands of names; copying each was a fifth of a cached open): the data must not change
// afterwards.
func (r *decoder) str() string {
	b := r.bytes()
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func (r *decoder) ranges() [][2]uint64 {
	n := r.count(2)
	if n == 0 {
		return nil
	}
	out := make([][2]uint64, n)
	for i := range out {
		out[i] = [2]uint64{r.uint(), r.uint()}
	}
	return out
}
