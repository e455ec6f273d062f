package cdti

import "fmt"

// Extension command types of the link-map query (see GetLinkMap).
const (
	TypeGetLinkMap    CommandType = 1107
	TypeGetLinkMapAck CommandType = 1108
)

// Limits of GetLinkMap.
const (
	// MaxLinkMapEntries bounds the entries of a GetLinkMapAck: a longer list is taken for a
	// corrupt one.
	MaxLinkMapEntries = 4096
	// MaxLinkMapSize bounds GetLinkMap.MaxLength: a GetLinkMapAck of this size still fits in
	// one QueryAck beside a GetTargetInfoAck and a GetAuxVectorsAck.
	MaxLinkMapSize = 56 << 10
	// DefaultLinkMapSize is GetLinkMap's bound when MaxLength is 0.
	DefaultLinkMapSize    = 16 << 10
	getLinkMapSize        = 32
	getLinkMapAckBaseSize = 32 // + the entries
	linkMapEntryBaseSize  = 24 // + the name, padded to a multiple of 8
)

// GetLinkMap asks the agent to walk the dynamic linker's link map of the process and answer
// every entry with its load bias and file name, so that a tool learns a process's shared
// objects in one exchange instead of one memory read per word group and name. The agent finds
// r_debug from RDebug when the tool knows it (the dynamic linker never moves it), else from
// DT_DEBUG in the executable's dynamic section: at Dynamic (DynamicSize bytes of it) when the
// tool gives it, else where the executable's program headers say (the auxiliary vector's
// AT_PHDR and AT_PHNUM, which the agent reads itself).
//
// Answers: CmdSuccess with the list (a static program: r_debug 0 and no entries);
// CmdAddrErr while DT_DEBUG is still 0 (the dynamic linker has not set r_debug up yet);
// CmdParmErr when memory on the way cannot be read, the list loops or holds more than
// MaxLinkMapEntries entries, or a name is longer than MaxExePathSize bytes; CmdLngthErr when
// the answer would be larger than Limit (the tool may then read the map word by word): never
// a list cut short. A real CNK answers CmdInval.
//
// Encoded: thread id u32 @0, dynamic section address u64 @8 (0: from the program headers),
// its size u32 @16, max length u32 @20 (0: DefaultLinkMapSize, at most MaxLinkMapSize),
// r_debug address u64 @24 (0: not known).
type GetLinkMap struct {
	ThreadID    uint32
	Dynamic     uint64
	DynamicSize uint32
	MaxLength   uint32
	RDebug      uint64
}

func (c *GetLinkMap) CommandType() CommandType { return TypeGetLinkMap }
func (c *GetLinkMap) Thread() uint32           { return c.ThreadID }
func (c *GetLinkMap) EncodedSize() int         { return getLinkMapSize }
func (c *GetLinkMap) AckSize() int             { return int(c.Limit()) }
func (c *GetLinkMap) Encode(b []byte) {
	be.PutUint32(b, c.ThreadID)
	be.PutUint64(b[8:], c.Dynamic)
	be.PutUint32(b[16:], c.DynamicSize)
	be.PutUint32(b[20:], c.MaxLength)
	be.PutUint64(b[24:], c.RDebug)
}

// Limit is the effective bound on the size of the ack.
func (c *GetLinkMap) Limit() uint32 {
	if c.MaxLength == 0 {
		return DefaultLinkMapSize
	}
	return min(c.MaxLength, MaxLinkMapSize)
}

func (c *GetLinkMap) validate() error {
	if c.MaxLength > MaxLinkMapSize {
		return fmt.Errorf("cdti: GetLinkMap MaxLength %d (limit %d)", c.MaxLength, MaxLinkMapSize)
	}
	return nil
}

func decGetLinkMap(b []byte) (Command, error) {
	if err := need(TypeGetLinkMap, b, getLinkMapSize); err != nil {
		return nil, err
	}
	c := &GetLinkMap{ThreadID: be.Uint32(b), Dynamic: be.Uint64(b[8:]), DynamicSize: be.Uint32(b[16:]),
		MaxLength: be.Uint32(b[20:]), RDebug: be.Uint64(b[24:])}
	if c.MaxLength > MaxLinkMapSize {
		return nil, fmt.Errorf("%v: max length %d (limit %d)", TypeGetLinkMap, c.MaxLength, MaxLinkMapSize)
	}
	return c, nil
}

// LinkMapEntry is one entry of a GetLinkMapAck, in the link map's order.
type LinkMapEntry struct {
	Bias uint64 // l_addr: the object's load bias
	Node uint64 // the link_map entry's own address
	Name string // the file name l_name points to ("" for the executable and for unnamed entries)
}

// size is the entry's encoded size.
func (e LinkMapEntry) size() int { return linkMapEntryBaseSize + round8(len(e.name())) }

func (e LinkMapEntry) name() string { return e.Name[:min(len(e.Name), MaxExePathSize)] }

// GetLinkMapAck answers GetLinkMap: r_debug's address u64 @8, its r_brk u64 @16, its r_state
// u32 @24 (0 consistent, 1 RT_ADD, 2 RT_DELETE: a map being changed), entry count u32 @28,
// entries @32, each {l_addr u64, node address u64, name length u32 @16, pad u32, name @24}
// padded to a multiple of 8 (the padding included in the payload). Names are at most MaxExePathSize bytes and entries at most
// MaxLinkMapEntries: an agent answers CmdParmErr rather than send a list or a name cut short
// (the encoder cuts what is over the limits, the decoder refuses it).
type GetLinkMapAck struct {
	ThreadID uint32
	RDebug   uint64
	Brk      uint64
	State    uint32
	Entries  []LinkMapEntry
}

func (a *GetLinkMapAck) CommandType() CommandType { return TypeGetLinkMapAck }
func (a *GetLinkMapAck) Thread() uint32           { return a.ThreadID }
func (a *GetLinkMapAck) entries() []LinkMapEntry {
	return a.Entries[:min(len(a.Entries), MaxLinkMapEntries)]
}
func (a *GetLinkMapAck) EncodedSize() int {
	n := getLinkMapAckBaseSize
	for _, e := range a.entries() {
		n += e.size()
	}
	return n
}
func (a *GetLinkMapAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	be.PutUint64(b[8:], a.RDebug)
	be.PutUint64(b[16:], a.Brk)
	be.PutUint32(b[24:], a.State)
	es := a.entries()
	be.PutUint32(b[28:], uint32(len(es)))
	at := getLinkMapAckBaseSize
	for _, e := range es {
		be.PutUint64(b[at:], e.Bias)
		be.PutUint64(b[at+8:], e.Node)
		be.PutUint32(b[at+16:], uint32(len(e.name())))
		copy(b[at+24:], e.name())
		at += e.size()
	}
}

func decGetLinkMapAck(b []byte) (Ack, error) {
	if err := need(TypeGetLinkMapAck, b, getLinkMapAckBaseSize); err != nil {
		return nil, err
	}
	n := be.Uint32(b[28:])
	if n > MaxLinkMapEntries || uint64(n) > uint64((len(b)-getLinkMapAckBaseSize)/linkMapEntryBaseSize) {
		return nil, fmt.Errorf("%v: %d entries (limit %d) in a payload of %d bytes", TypeGetLinkMapAck, n,
			MaxLinkMapEntries, len(b))
	}
	a := &GetLinkMapAck{ThreadID: be.Uint32(b), RDebug: be.Uint64(b[8:]), Brk: be.Uint64(b[16:]),
		State: be.Uint32(b[24:]), Entries: list[LinkMapEntry](int(n))}
	at := getLinkMapAckBaseSize
	for i := range a.Entries {
		if len(b)-at < linkMapEntryBaseSize {
			return nil, fmt.Errorf("%v: entry %d of %d at %d in a payload of %d bytes", TypeGetLinkMapAck, i, n, at, len(b))
		}
		l := be.Uint32(b[at+16:])
		if l > MaxExePathSize || uint64(round8(int(l))) > uint64(len(b)-at-linkMapEntryBaseSize) {
			return nil, fmt.Errorf("%v: entry %d: name of %d bytes (limit %d) in a payload of %d bytes at %d",
				TypeGetLinkMapAck, i, l, MaxExePathSize, len(b), at)
		}
		a.Entries[i] = LinkMapEntry{Bias: be.Uint64(b[at:]), Node: be.Uint64(b[at+8:]),
			Name: string(b[at+24 : at+24+int(l)])}
		at += linkMapEntryBaseSize + round8(int(l))
	}
	return a, nil
}

func init() {
	register(TypeGetLinkMap, "GetLinkMap", MsgQuery, true, decGetLinkMap, decGetLinkMapAck)
}
