package debugger

import (
	"context"
	"debug/elf"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// rankMemory is a rank's memory as the symbol layer reads it (symbols.Memory and
// symbols.MemoryWriter): read-only file-backed segments come from the files on the front end,
// everything else through CDTI GetMemory, cached per stop by block (memcache.go).
type rankMemory struct {
	rs *rankSymbols

	mu    sync.Mutex
	pages blocks
	// scratch holds the blocks read through transient (the thread library's data, read once
	// when a rank's threads are labelled) until dropScratch: a stopped rank keeps only the
	// blocks its stack and variables need.
	scratch blocks
	epoch   int // bumped by reset and WriteAt: blocks read before it are stale
	// recording is set by recordFetches: the ranges transient reads fetch are kept in rec.
	recording bool
	rec       []memSpan
	ro        []roSegment
	// live is set while other threads of the rank run (stop mode thread): memory can change
	// under the reader, so nothing is cached.
	live atomic.Bool
}

// roSegment is a read-only PT_LOAD segment of a module, at run-time addresses.
type roSegment struct {
	lo, hi uint64
	bin    *symbols.Binary
	bias   uint64
}

func (m *rankMemory) reset() {
	m.mu.Lock()
	m.pages = nil
	m.scratch = nil
	m.epoch++
	m.mu.Unlock()
}

// setModules records which ranges can be read from the files: read-only segments, whose
// contents the process cannot have changed (the agent shows planted traps as the original
// instructions, so the file and the process agree).
func (m *rankMemory) setModules(mods []*symbols.Module) {
	var ro []roSegment
	for _, mod := range mods {
		for _, p := range mod.Bin.LoadSegments() {
			if p.Flags&elf.PF_W != 0 || p.Filesz == 0 {
				continue
			}
			ro = append(ro, roSegment{lo: p.Vaddr + mod.Bias, hi: p.Vaddr + p.Filesz + mod.Bias, bin: mod.Bin, bias: mod.Bias})
		}
	}
	m.mu.Lock()
	m.ro = ro
	m.mu.Unlock()
}

func (m *rankMemory) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// ReadAt reads len(p) bytes at addr.
func (m *rankMemory) ReadAt(p []byte, addr uint64) (int, error) { return m.read(p, addr, false) }

// transientMemory reads a rank's memory as rankMemory does, but keeps the pages it fetches
// apart (rankMemory.scratch), to be dropped once the work that needed them is done.
type transientMemory struct{ m *rankMemory }

// ReadAt reads len(p) bytes at addr.
func (t transientMemory) ReadAt(p []byte, addr uint64) (int, error) { return t.m.read(p, addr, true) }

// transient returns the memory for reads whose pages are not to be kept for the stop.
func (m *rankMemory) transient() transientMemory { return transientMemory{m} }

// dropScratch forgets the pages read through transient.
func (m *rankMemory) dropScratch() {
	m.mu.Lock()
	m.scratch = nil
	m.mu.Unlock()
}

// memSpan is a block-aligned range of memory [lo, hi).
type memSpan struct{ lo, hi uint64 }

// recordFetches starts recording the ranges that transient reads fetch.
func (m *rankMemory) recordFetches() {
	m.mu.Lock()
	m.recording, m.rec = true, nil
	m.mu.Unlock()
}

// recorded stops recording and returns, of the ranges fetched since recordFetches, the
// blocks a read used (adjacent ones merged): a page is fetched for a pointer or two, and
// the blocks around them need not be read again elsewhere. A block the stop's cache already
// held was read from there, so its used mark is that copy's.
func (m *rankMemory) recorded() []memSpan {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []memSpan
	for _, s := range m.rec {
		for a := s.lo; a < s.hi; a += blockSize {
			if !m.scratch[a].used && !m.pages[a].used {
				continue
			}
			if n := len(out); n > 0 && out[n-1].hi == a {
				out[n-1].hi = a + blockSize
			} else {
				out = append(out, memSpan{a, a + blockSize})
			}
		}
	}
	m.recording, m.rec = false, nil
	return out
}

// prefetch reads spans into the transient cache with one Query (split only if too large for
// one message), for reads through transient that would fetch them one after the other, and
// returns the results of the commands first, sent first in the same Query (nil if it could
// not be sent). A span that cannot be read is left out.
func (m *rankMemory) prefetch(ctx context.Context, spans []memSpan, first ...cdti.Command) []cdti.Result {
	if m.live.Load() {
		spans = nil
	}
	cmds, at := spanCommands(spans, first)
	epoch := m.currentEpoch()
	if len(cmds) == 0 {
		return nil
	}
	res, err := m.rs.client().QueryBatch(ctx, m.rs.num(), cmds)
	if err != nil || len(res) != len(cmds) {
		return nil
	}
	m.keep(epoch, spans, at, res)
	return res[:len(first)]
}

// spanCommands returns the command list that reads spans after the commands first, and the
// index of each span's first command in it.
func spanCommands(spans []memSpan, first []cdti.Command) (cmds []cdti.Command, at []int) {
	return readCommands(first, len(spans), func(i int) []cdti.Command {
		return cdti.SplitGetMemory(0, spans[i].lo, int(spans[i].hi-spans[i].lo), cdti.SpecAccessUseThreadState)
	})
}

// readCommands returns first followed by the commands read(i) makes for each of n ranges, and
// the index of each range's first command in the list.
func readCommands(first []cdti.Command, n int, read func(i int) []cdti.Command) (cmds []cdti.Command, at []int) {
	cmds = slices.Clone(first)
	for i := range n {
		at = append(at, len(cmds))
		cmds = append(cmds, read(i)...)
	}
	return cmds, at
}

// currentEpoch returns the cache's epoch, taken before a read whose data keep will store.
func (m *rankMemory) currentEpoch() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// keep stores in the transient cache the spans that res, the results of a command list that
// reads them (span i from index at[i]: spanCommands' list, or GetModuleMemory's), read whole
// at their addresses, unless the cache was reset since epoch. An empty span is skipped.
func (m *rankMemory) keep(epoch int, spans []memSpan, at []int, res []cdti.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.epoch != epoch {
		return
	}
	if m.scratch == nil {
		m.scratch = blocks{}
	}
	for i, s := range spans {
		end := len(res)
		if i+1 < len(at) {
			end = at[i+1]
		}
		data := make([]byte, 0, s.hi-s.lo)
		for k := at[i]; k < end && k < len(res); k++ {
			addr, d, ok := memoryRead(res[k])
			if !ok || addr != s.lo+uint64(len(data)) {
				break
			}
			data = append(data, d...)
		}
		if s.lo < s.hi && len(data) == int(s.hi-s.lo) {
			m.scratch.put(s.lo, data)
		}
	}
}

// memoryRead returns the address and data of a successful GetMemory or GetModuleMemory.
func memoryRead(r cdti.Result) (addr uint64, data []byte, ok bool) {
	if r.Code != cdti.CmdSuccess {
		return 0, nil, false
	}
	switch a := r.Ack.(type) {
	case *cdti.GetMemoryAck:
		return a.Addr, a.Data, true
	case *cdti.GetModuleMemoryAck:
		return a.Addr, a.Data, true
	}
	return 0, nil, false
}

// cached reports whether the block at a is cached in either map; m.mu must be held.
func (m *rankMemory) cached(a uint64) bool { return m.pages.has(a) || m.scratch.has(a) }

// use returns the cached block at a from either map, marking it used; m.mu must be held.
func (m *rankMemory) use(a uint64) []byte {
	if m.pages.has(a) {
		return m.pages.use(a)
	}
	return m.scratch.use(a)
}

// trim drops the cached blocks no read has used (after a stack is unwound).
func (m *rankMemory) trim() {
	m.mu.Lock()
	m.pages = m.pages.trimmed()
	m.mu.Unlock()
}

// read reads len(p) bytes at addr through the cache, keeping the blocks it fetches in
// m.scratch when transient is set, else in m.pages.
func (m *rankMemory) read(p []byte, addr uint64, transient bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	end := addr + uint64(len(p))
	if end < addr {
		return 0, fmt.Errorf("read memory %#x+%d: address overflow", addr, len(p))
	}
	m.mu.Lock()
	for _, s := range m.ro {
		if addr >= s.lo && end <= s.hi {
			m.mu.Unlock()
			n, err := s.bin.ReadCode(p, addr-s.bias)
			if err == nil && n == len(p) {
				return n, nil
			}
			m.mu.Lock()
			break
		}
	}
	if m.live.Load() {
		m.mu.Unlock()
		return m.readExact(p, addr)
	}
	first := addr &^ (blockSize - 1)
	last := (end - 1) &^ (blockSize - 1)
	// Fetch the pages of the missing blocks of the range in one batched read.
	var missLo, missHi uint64
	missing := false
	for a := first; ; a += blockSize {
		if !m.cached(a) {
			if !missing {
				missLo = a &^ (pageSize - 1)
			}
			missing = true
			missHi = (a + pageSize) &^ (pageSize - 1)
		}
		if a == last {
			break
		}
	}
	epoch := m.epoch
	m.mu.Unlock()
	if missing && missHi-missLo <= 64*pageSize {
		ctx, cancel := m.ctx()
		// Partly unmapped (an error): the readable prefix is kept, the request read exactly
		// below.
		data, _ := m.rs.client().ReadMemory(ctx, m.rs.num(), 0, missLo, int(missHi-missLo), cdti.SpecAccessUseThreadState)
		cancel()
		m.mu.Lock()
		if m.epoch != epoch {
			// The rank ran (or memory was written) during the read: what was read belongs to
			// no cache; read the request exactly.
			m.mu.Unlock()
			return m.readExact(p, addr)
		}
		to := &m.pages
		if transient {
			to = &m.scratch
		}
		if *to == nil {
			*to = blocks{}
		}
		to.put(missLo, data) // and used below before a trim can drop them
		if transient && m.recording {
			m.rec = append(m.rec, memSpan{missLo, missHi})
		}
	} else {
		m.mu.Lock()
	}
	complete := true
	for a := first; ; a += blockSize {
		if !m.cached(a) {
			complete = false
			break
		}
		if a == last {
			break
		}
	}
	if complete {
		n := 0
		for a := first; n < len(p); a += blockSize {
			b := m.use(a)
			if b == nil {
				break
			}
			off := uint64(0)
			if a < addr {
				off = addr - a
			}
			n += copy(p[n:], b[off:])
		}
		if n == len(p) {
			m.mu.Unlock()
			m.shadow(p, addr)
			return n, nil
		}
	}
	m.mu.Unlock()
	return m.readExact(p, addr)
}

// readExact reads exactly the bytes asked for, through CDTI, without the cache.
func (m *rankMemory) readExact(p []byte, addr uint64) (int, error) {
	ctx, cancel := m.ctx()
	defer cancel()
	data, err := m.rs.client().ReadMemory(ctx, m.rs.num(), 0, addr, len(p), cdti.SpecAccessUseThreadState)
	n := copy(p, data)
	m.shadow(p[:n], addr)
	if err != nil {
		return n, fmt.Errorf("cannot access memory at address %#x", addr+uint64(n))
	}
	return n, nil
}

// WriteAt writes p at addr (the rank must be stopped: SetMemory needs control authority).
func (m *rankMemory) WriteAt(p []byte, addr uint64) (int, error) {
	ctx, cancel := m.ctx()
	defer cancel()
	if err := m.rs.client().WriteMemory(ctx, m.rs.num(), 0, addr, p, cdti.SpecAccessUseThreadState, cdti.SharedMemoryAllow); err != nil {
		return 0, err
	}
	m.mu.Lock()
	// Keep the cache coherent: patch cached blocks.
	for i := range p {
		a := addr + uint64(i)
		for _, bs := range []blocks{m.pages, m.scratch} {
			if b := bs[a&^(blockSize-1)]; b.data != nil {
				b.data[a&(blockSize-1)] = p[i]
			}
		}
	}
	m.epoch++ // a read that started before the write keeps nothing it read
	m.mu.Unlock()
	return len(p), nil
}

// readDirect reads memory without the cache (for readMemory requests, which must show what is
// in memory now) and reports how many bytes were readable.
func (m *rankMemory) readDirect(ctx context.Context, addr uint64, n int) ([]byte, error) {
	data, err := m.rs.client().ReadMemory(ctx, m.rs.num(), 0, addr, n, cdti.SpecAccessUseThreadState)
	m.shadow(data, addr)
	return data, err
}

// shadow shows the program's instructions where the front end planted traps behind a BG/Q
// CNK, whose memory reads show the traps (an hpcdap agent's reads do this itself).
func (m *rankMemory) shadow(p []byte, addr uint64) {
	if r := m.rs.rank; r != nil && r.job != nil && r.behindCNK() {
		r.job.bps.shadowCNK(r, addr, p)
	}
}

// WriteMemory writes data at addr of rank r (its symbols are read first, if they were not).
func (j *Job) WriteMemory(ctx context.Context, r *Rank, addr uint64, data []byte) error {
	if err := r.sym.ensure(ctx); err != nil {
		return err
	}
	if _, err := r.sym.mem.WriteAt(data, addr); err != nil {
		return fmt.Errorf("write at %#x on rank %d: %w", addr, r.Num, err)
	}
	return nil
}
