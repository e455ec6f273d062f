package procimage

import "fmt"

// RDebug is the dynamic linker's struct r_debug (<link.h>).
type RDebug struct {
	Version int32  // r_version
	Map     uint64 // r_map: the first link_map entry (the executable)
	Brk     uint64 // r_brk: the function the dynamic linker calls around every change
	State   RState // r_state
	LdBase  uint64 // r_ldbase: the dynamic linker's load address
}

// RState is r_debug.r_state.
type RState uint32

// The states of the link map.
const (
	RTConsistent RState = 0 // the map is consistent
	RTAdd        RState = 1 // an object is being added
	RTDelete     RState = 2 // an object is being removed
)

// Changing reports whether the dynamic linker is between the two r_brk calls that bracket a
// change: only the second sees a consistent map.
func (r RDebug) Changing() bool { return r.State != RTConsistent }

// rdebugSize is the size of struct r_debug: int r_version padded to a word, two pointers, the
// enum r_state padded to a word, and a pointer.
func (l Layout) rdebugSize() int { return 5 * l.PtrSize }

// DecodeRDebug decodes a struct r_debug.
func DecodeRDebug(b []byte, l Layout) (RDebug, error) {
	if err := l.check(); err != nil {
		return RDebug{}, err
	}
	ps := l.PtrSize
	if len(b) < l.rdebugSize() {
		return RDebug{}, fmt.Errorf("procimage: r_debug: %d bytes, want %d", len(b), l.rdebugSize())
	}
	return RDebug{Version: int32(l.Order.Uint32(b)), Map: l.word(b[ps:]), Brk: l.word(b[2*ps:]),
		State: RState(l.Order.Uint32(b[3*ps:])), LdBase: l.word(b[4*ps:])}, nil
}

// RDebug reads the struct r_debug at addr.
func (im Image) RDebug(addr uint64) (RDebug, error) {
	if err := im.check(); err != nil {
		return RDebug{}, err
	}
	b, err := im.read(addr, im.rdebugSize())
	if err != nil {
		return RDebug{}, fmt.Errorf("procimage: read r_debug at %#x: %w", addr, err)
	}
	return DecodeRDebug(b, im.Layout)
}

// LinkEntry is one entry of the link map: the public head of struct link_map.
type LinkEntry struct {
	Node uint64 // the entry's own address
	Addr uint64 // l_addr: the object's load bias
	Name uint64 // l_name: address of its file name ("" for the executable)
	Ld   uint64 // l_ld: run-time address of its dynamic section
	Next uint64 // l_next
	Prev uint64 // l_prev
}

// DecodeLinkEntry decodes the head of a struct link_map found at node.
func DecodeLinkEntry(b []byte, node uint64, l Layout) (LinkEntry, error) {
	if err := l.check(); err != nil {
		return LinkEntry{}, err
	}
	ps := l.PtrSize
	if len(b) < 5*ps {
		return LinkEntry{}, fmt.Errorf("procimage: link_map at %#x: %d bytes, want %d", node, len(b), 5*ps)
	}
	return LinkEntry{Node: node, Addr: l.word(b), Name: l.word(b[ps:]), Ld: l.word(b[2*ps:]),
		Next: l.word(b[3*ps:]), Prev: l.word(b[4*ps:])}, nil
}

// MaxLinkEntries bounds a link-map walk: a longer list is taken for a corrupt one.
const MaxLinkEntries = 4096

// LinkMap reads the link map from its first entry (r_debug.r_map) along l_next. A list that
// loops or is longer than MaxLinkEntries is an error, as is an entry that cannot be read.
func (im Image) LinkMap(first uint64) ([]LinkEntry, error) {
	if err := im.check(); err != nil {
		return nil, err
	}
	var out []LinkEntry
	seen := map[uint64]bool{}
	for node := first; node != 0; {
		if seen[node] || len(out) >= MaxLinkEntries {
			return nil, fmt.Errorf("procimage: link_map list loops or exceeds %d entries at %#x", MaxLinkEntries, node)
		}
		seen[node] = true
		b, err := im.read(node, 5*im.PtrSize)
		if err != nil {
			return nil, fmt.Errorf("procimage: read link_map at %#x: %w", node, err)
		}
		e, err := DecodeLinkEntry(b, node, im.Layout)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		node = e.Next
	}
	return out, nil
}
