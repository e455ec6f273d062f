package cdti

import "math"

// SpecialRegs is BG_Special_Regs (72 bytes).
type SpecialRegs struct {
	IAR, LR, MSR, CR, CTR, XER, FPSCR, DEAR, ESR uint64
}

const specialRegsSize = 72

func (r *SpecialRegs) put(b []byte) {
	for i, v := range [...]uint64{r.IAR, r.LR, r.MSR, r.CR, r.CTR, r.XER, r.FPSCR, r.DEAR, r.ESR} {
		be.PutUint64(b[8*i:], v)
	}
}

func (r *SpecialRegs) get(b []byte) {
	for i, p := range [...]*uint64{&r.IAR, &r.LR, &r.MSR, &r.CR, &r.CTR, &r.XER, &r.FPSCR, &r.DEAR, &r.ESR} {
		*p = be.Uint64(b[8*i:])
	}
}

// Get returns the register selected by s (0 for an unknown selector).
func (r *SpecialRegs) Get(s SpecialReg) uint64 {
	if s < RegIAR || s > RegESR {
		return 0
	}
	return [...]uint64{r.IAR, r.LR, r.MSR, r.CR, r.CTR, r.XER, r.FPSCR, r.DEAR, r.ESR}[s-1]
}

// Set stores v in the register selected by s; it reports false for an unknown selector.
func (r *SpecialRegs) Set(s SpecialReg, v uint64) bool {
	if s < RegIAR || s > RegESR {
		return false
	}
	*[...]*uint64{&r.IAR, &r.LR, &r.MSR, &r.CR, &r.CTR, &r.XER, &r.FPSCR, &r.DEAR, &r.ESR}[s-1] = v
	return true
}

// DebugRegs is BG_Debug_Regs (104 bytes).
type DebugRegs struct {
	DBCR0, DBCR1, DBCR2, DBCR3 uint64
	DAC1, DAC2, DAC3, DAC4     uint64
	IAC1, IAC2, IAC3, IAC4     uint64
	DBSR                       uint64
}

const debugRegsSize = 104

func (r *DebugRegs) ptrs() [13]*uint64 {
	return [...]*uint64{&r.DBCR0, &r.DBCR1, &r.DBCR2, &r.DBCR3, &r.DAC1, &r.DAC2, &r.DAC3, &r.DAC4,
		&r.IAC1, &r.IAC2, &r.IAC3, &r.IAC4, &r.DBSR}
}

func (r *DebugRegs) put(b []byte) {
	for i, p := range r.ptrs() {
		be.PutUint64(b[8*i:], *p)
	}
}

func (r *DebugRegs) get(b []byte) {
	for i, p := range r.ptrs() {
		*p = be.Uint64(b[8*i:])
	}
}

// Get returns the register selected by s (0 for an unknown selector).
func (r *DebugRegs) Get(s DebugReg) uint64 {
	if s < RegDBCR0 || s > RegDBSR {
		return 0
	}
	return *r.ptrs()[s-1]
}

// Set stores v in the register selected by s; it reports false for an unknown selector.
func (r *DebugRegs) Set(s DebugReg, v uint64) bool {
	if s < RegDBCR0 || s > RegDBSR {
		return false
	}
	*r.ptrs()[s-1] = v
	return true
}

// QPX is BG_Float: one 32-byte QPX register, as the four 64-bit words ll[0..3].
type QPX [4]uint64

const qpxSize = 32

// Scalar returns element 0 as a float64: the scalar FPR (an assumption of the spec, §7.2).
func (q QPX) Scalar() float64 { return math.Float64frombits(q[0]) }

func (q *QPX) put(b []byte) {
	for i, v := range q {
		be.PutUint64(b[8*i:], v)
	}
}

func (q *QPX) get(b []byte) {
	for i := range q {
		q[i] = be.Uint64(b[8*i:])
	}
}

// StackFrame is BG_Stack_Info: one frame of GetThreadDataAck's stack walk.
type StackFrame struct {
	FrameAddr uint64
	SavedLR   uint64
}

// ThreadEntry is one entry of GetThreadListAck.
type ThreadEntry struct {
	TID        uint32
	CommThread bool // the commthread bit: the MSB of the big-endian info word
}

// WatchEntry is one of the two DAC pairs reported by SetWatchpointAck and ResetWatchpointAck.
type WatchEntry struct {
	Addr   uint64
	Length uint32
	Type   WatchType // WatchNone for an empty slot
}

func (w *WatchEntry) put(b []byte) {
	be.PutUint64(b, w.Addr)
	be.PutUint32(b[8:], w.Length)
	be.PutUint32(b[12:], uint32(w.Type))
}

func (w *WatchEntry) get(b []byte) {
	w.Addr = be.Uint64(b)
	w.Length = be.Uint32(b[8:])
	w.Type = WatchType(be.Uint32(b[12:]))
}

// Timespec is a struct timespec (16 bytes).
type Timespec struct {
	Sec  int64
	Nsec int64
}

// Timeval is a struct timeval (16 bytes).
type Timeval struct {
	Sec  int64
	Usec int64
}

// Stat64 is struct stat64 in the ppc64 glibc layout (144 bytes), as GetFileStatDataAck sends it.
type Stat64 struct {
	Dev     uint64
	Ino     uint64
	Nlink   uint64
	Mode    uint32
	UID     uint32
	GID     uint32
	Rdev    uint64
	Size    int64
	Blksize int64
	Blocks  int64
	Atim    Timespec
	Mtim    Timespec
	Ctim    Timespec
}

const stat64Size = 144

func (s *Stat64) put(b []byte) {
	be.PutUint64(b[0:], s.Dev)
	be.PutUint64(b[8:], s.Ino)
	be.PutUint64(b[16:], s.Nlink)
	be.PutUint32(b[24:], s.Mode)
	be.PutUint32(b[28:], s.UID)
	be.PutUint32(b[32:], s.GID)
	be.PutUint64(b[40:], s.Rdev)
	be.PutUint64(b[48:], uint64(s.Size))
	be.PutUint64(b[56:], uint64(s.Blksize))
	be.PutUint64(b[64:], uint64(s.Blocks))
	for i, t := range [...]Timespec{s.Atim, s.Mtim, s.Ctim} {
		be.PutUint64(b[72+16*i:], uint64(t.Sec))
		be.PutUint64(b[80+16*i:], uint64(t.Nsec))
	}
}

func (s *Stat64) get(b []byte) {
	s.Dev = be.Uint64(b[0:])
	s.Ino = be.Uint64(b[8:])
	s.Nlink = be.Uint64(b[16:])
	s.Mode = be.Uint32(b[24:])
	s.UID = be.Uint32(b[28:])
	s.GID = be.Uint32(b[32:])
	s.Rdev = be.Uint64(b[40:])
	s.Size = int64(be.Uint64(b[48:]))
	s.Blksize = int64(be.Uint64(b[56:]))
	s.Blocks = int64(be.Uint64(b[64:]))
	for i, t := range [...]*Timespec{&s.Atim, &s.Mtim, &s.Ctim} {
		t.Sec = int64(be.Uint64(b[72+16*i:]))
		t.Nsec = int64(be.Uint64(b[80+16*i:]))
	}
}
