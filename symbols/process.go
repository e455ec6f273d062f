package symbols

import (
	"errors"
	"fmt"
)

// Memory is read access to a process's address space. ReadAt reads len(p) bytes at addr; a
// short read returns an error, as io.ReaderAt does.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// MemoryWriter is implemented by memory that can be written (a live process); assignment to
// variables needs it.
type MemoryWriter interface {
	WriteAt(p []byte, addr uint64) (int, error)
}

// RegisterWriter is implemented by processes whose frame-0 registers can be written, for
// assignment to variables living in registers.
type RegisterWriter interface {
	WriteRegister(reg int, value []byte) error
}

// TLSResolver finds thread-local storage; a thread library package serves it. It returns the
// run-time address of offset within module mod's TLS block for the thread whose frame-0
// registers are regs.
type TLSResolver interface {
	TLSAddress(regs *Regs, mod *Module, offset uint64) (uint64, error)
}

// Module is a Binary mapped into a process at a load bias.
type Module struct {
	Bin  *Binary
	Path string // path as the process names it (NT_FILE, link map)
	Bias uint64 // run-time address = link-time address + Bias
	Lo   uint64 // lowest run-time address covered by the module's segments
	Hi   uint64 // end of the highest segment
}

// NewModule places bin at a load bias.
func NewModule(bin *Binary, path string, bias uint64) *Module {
	m := &Module{Bin: bin, Path: path, Bias: bias}
	first := true
	for _, l := range bin.loads {
		lo, hi := l.Vaddr+bias, l.Vaddr+l.Memsz+bias
		if first || lo < m.Lo {
			m.Lo = lo
		}
		if first || hi > m.Hi {
			m.Hi = hi
		}
		first = false
	}
	return m
}

// Contains reports whether a run-time address lies in the module.
func (m *Module) Contains(addr uint64) bool { return addr >= m.Lo && addr < m.Hi }

// Process is what the symbol layer knows of one stopped process or core file: its memory, the
// modules mapped into it, and an optional thread-local storage resolver. Frames and values
// refer to it; it is safe for concurrent use as long as Mem is.
type Process struct {
	Arch *Arch
	Mem  Memory
	TLS  TLSResolver
	// Regs writes frame-0 registers for assignments; nil for a core file.
	Regs RegisterWriter
	mods []*Module
}

// NewProcess describes a process. The first module is taken to be the executable.
func NewProcess(arch *Arch, mem Memory, mods ...*Module) *Process {
	p := &Process{Arch: arch, Mem: mem}
	for _, m := range mods {
		p.AddModule(m)
	}
	return p
}

// AddModule adds a mapped object (for example a shared library loaded later).
func (p *Process) AddModule(m *Module) {
	p.mods = append(p.mods, m)
}

// Modules returns the mapped objects, the executable first.
func (p *Process) Modules() []*Module { return p.mods }

// Executable returns the main program's module, or nil.
func (p *Process) Executable() *Module {
	if len(p.mods) == 0 {
		return nil
	}
	return p.mods[0]
}

// ModuleAt returns the module covering a run-time address, or nil.
func (p *Process) ModuleAt(addr uint64) *Module {
	for _, m := range p.mods {
		if m.Contains(addr) {
			return m
		}
	}
	return nil
}

// ReadMemory reads exactly len(b) bytes at addr.
func (p *Process) ReadMemory(b []byte, addr uint64) error {
	if p.Mem == nil {
		return errors.New("symbols: no memory")
	}
	n, err := p.Mem.ReadAt(b, addr)
	if n == len(b) {
		return nil
	}
	if err == nil {
		err = errors.New("short read")
	}
	return fmt.Errorf("read memory at %#x: %w", addr, err)
}

// readUint reads an unsigned integer of size bytes in target order.
func (p *Process) readUint(addr uint64, size int) (uint64, error) {
	var buf [8]byte
	if size > 8 || size <= 0 {
		return 0, fmt.Errorf("symbols: read of %d-byte integer", size)
	}
	if err := p.ReadMemory(buf[:size], addr); err != nil {
		return 0, err
	}
	return uintFrom(buf[:size], p.Arch), nil
}

func uintFrom(b []byte, a *Arch) uint64 {
	var v uint64
	if a.ByteOrder.String() == "BigEndian" {
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		return v
	}
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// SymbolAt returns the ELF symbol covering a run-time address and the offset into it, for
// "<g_nodes+72>" annotations.
func (p *Process) SymbolAt(addr uint64) (Symbol, uint64, bool) {
	m := p.ModuleAt(addr)
	if m == nil {
		return Symbol{}, 0, false
	}
	s, ok := m.Bin.Symbol(addr - m.Bias)
	if !ok {
		return Symbol{}, 0, false
	}
	return s, addr - m.Bias - s.Addr, true
}
