package debugger

import (
	"context"
	"debug/elf"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// pageSize is the granule of the per-stop memory cache. Symbol work reads many small pieces
// of the stack and data; one CDTI round trip fetches a whole page instead.
const pageSize = 4096

// rankMemory is a rank's memory as the symbol layer reads it (symbols.Memory and
// symbols.MemoryWriter): read-only file-backed segments come from the files on the front end,
// everything else through CDTI GetMemory, cached per stop by page.
type rankMemory struct {
	rs *rankSymbols

	mu    sync.Mutex
	pages map[uint64][]byte // page-aligned address → contents (nil: unreadable)
	epoch int               // bumped by reset: pages read before it belong to an older stop
	ro    []roSegment
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
func (m *rankMemory) ReadAt(p []byte, addr uint64) (int, error) {
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
	if m.pages == nil {
		m.pages = map[uint64][]byte{}
	}
	first := addr &^ (pageSize - 1)
	last := (end - 1) &^ (pageSize - 1)
	// Fetch the missing pages of the range in one batched read.
	var missLo, missHi uint64
	missing := false
	for pg := first; ; pg += pageSize {
		if _, ok := m.pages[pg]; !ok {
			if !missing {
				missLo = pg
			}
			missing = true
			missHi = pg + pageSize
		}
		if pg == last {
			break
		}
	}
	epoch := m.epoch
	m.mu.Unlock()
	if missing && missHi-missLo <= 64*pageSize {
		ctx, cancel := m.ctx()
		data, err := m.rs.client().ReadMemory(ctx, m.rs.num(), 0, missLo, int(missHi-missLo), cdti.SpecAccessUseThreadState)
		cancel()
		m.mu.Lock()
		if m.epoch != epoch {
			// The rank ran (or memory was written) during the read: what was read belongs to
			// no cache; read the request exactly.
			m.mu.Unlock()
			return m.readExact(p, addr)
		}
		if err == nil {
			for pg := missLo; pg < missHi; pg += pageSize {
				m.pages[pg] = data[pg-missLo : pg-missLo+pageSize]
			}
		} else {
			// Partly unmapped: keep the readable prefix, read the request exactly below.
			for pg := missLo; pg+pageSize <= missLo+uint64(len(data)); pg += pageSize {
				m.pages[pg] = data[pg-missLo : pg-missLo+pageSize]
			}
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	complete := true
	for pg := first; ; pg += pageSize {
		if m.pages[pg] == nil {
			complete = false
			break
		}
		if pg == last {
			break
		}
	}
	if complete {
		n := 0
		for pg := first; n < len(p); pg += pageSize {
			page := m.pages[pg]
			off := uint64(0)
			if pg < addr {
				off = addr - pg
			}
			n += copy(p[n:], page[off:])
		}
		m.mu.Unlock()
		m.shadow(p, addr)
		return n, nil
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
	// Keep the cache coherent: patch cached pages.
	for i := range p {
		a := addr + uint64(i)
		if page := m.pages[a&^(pageSize-1)]; page != nil {
			page[a&(pageSize-1)] = p[i]
		}
	}
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
