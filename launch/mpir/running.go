package mpir

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"strconv"

	"github.com/hpcdap/hpcdap/procimage"
)

// ReadRunningTable reads the MPIR proc table of launcher pid, a process of this host, without
// tracing it: through /proc/<pid>/auxv and /proc/<pid>/mem, which the launcher's user may read
// while another tool traces it (a tool that attached first holds the launcher's MPIR
// interface: a second tool of the job is started another way, BG/Q's start_tool, and needs
// the table alone). exe is the launcher's executable. A launcher that has not filled its
// table (MPIR_debug_state is not MPIR_DEBUG_SPAWNED) is an error.
func ReadRunningTable(ctx context.Context, pid int, exe string) ([]Proc, error) {
	fail := func(err error) ([]Proc, error) {
		return nil, fmt.Errorf("mpir: proc table of pid %d: %w", pid, err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		return fail(err)
	}
	l := procimage.Layout{Order: f.ByteOrder, PtrSize: 8}
	if f.Class == elf.ELFCLASS32 {
		l.PtrSize = 4
	}
	f.Close()
	dir := "/proc/" + strconv.Itoa(pid)
	ab, err := os.ReadFile(dir + "/auxv")
	if err != nil {
		return fail(err)
	}
	aux, err := procimage.ParseAuxv(ab, l)
	if err != nil {
		return fail(err)
	}
	mf, err := os.Open(dir + "/mem")
	if err != nil {
		return fail(err)
	}
	defer mf.Close()
	mem := fileMemory{mf}
	objs, err := Objects(ctx, mem, l, aux, exe)
	if err != nil {
		return fail(err)
	}
	syms, err := Resolve(objs)
	if err != nil {
		return fail(err)
	}
	readInt := func(addr uint64) (int, error) {
		b, err := mem.ReadMemory(ctx, addr, 4)
		if err != nil {
			return 0, err
		}
		return int(int32(l.Order.Uint32(b))), nil
	}
	state, err := readInt(syms.DebugState)
	if err != nil {
		return fail(fmt.Errorf("read MPIR_debug_state: %w", err))
	}
	if state != DebugSpawned {
		return fail(fmt.Errorf("MPIR_debug_state is %d: the launcher has not filled its table", state))
	}
	procs, err := ReadTable(ctx, mem, l, syms.Proctable, syms.ProctableSize)
	if err != nil {
		return fail(err)
	}
	return procs, nil
}

// fileMemory reads a process's memory from its /proc/<pid>/mem.
type fileMemory struct{ f *os.File }

// ReadMemory reads n bytes at addr of the process's memory.
func (m fileMemory) ReadMemory(_ context.Context, addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := m.f.ReadAt(b, int64(addr)); err != nil {
		return nil, fmt.Errorf("read %d bytes at %#x: %w", n, addr, err)
	}
	return b, nil
}
