package mpir

import (
	"context"
	"fmt"

	"github.com/hpcdap/hpcdap/procimage"
)

// MPIR_debug_state values.
const (
	DebugNull     = 0 // MPIR_NULL: nothing to do
	DebugSpawned  = 1 // MPIR_DEBUG_SPAWNED: the table is filled
	DebugAborting = 2 // MPIR_DEBUG_ABORTING: read MPIR_debug_abort_string
)

// EntrySize is the size of one MPIR_PROCDESC on LP64 targets: two pointers, an int and 4 bytes
// of tail padding (which launchers do not zero).
const EntrySize = 24

// entrySize is the size of one MPIR_PROCDESC {char *host_name; char *executable_name; int pid;}
// for a pointer size: 24 bytes on LP64, 12 on ILP32 (no padding: the int is pointer-aligned).
func entrySize(ptrSize int) int {
	if ptrSize == 4 {
		return 12
	}
	return EntrySize
}

// MaxProcs bounds MPIR_proctable_size: a larger value is taken for garbage.
const MaxProcs = 1 << 22

// Proc is one entry of MPIR_proctable; its index is the MPI_COMM_WORLD rank.
type Proc struct {
	Rank       int
	Host       string // the launcher's name for the node
	Executable string // as the launcher recorded it: often relative or unnormalised
	Pid        int    // a Linux pid (on BG/Q: the compute-node id)
}

// rawEntry is an undecoded table entry.
type rawEntry struct {
	host, exe uint64
	pid       int32
}

// parseEntries decodes n MPIR_PROCDESC entries laid out as l says.
func parseEntries(b []byte, n int, l procimage.Layout) ([]rawEntry, error) {
	size := entrySize(l.PtrSize)
	if n < 0 || n > MaxProcs || len(b) < n*size {
		return nil, fmt.Errorf("proctable: %d entries in %d bytes", n, len(b))
	}
	word := func(b []byte) uint64 {
		if l.PtrSize == 4 {
			return uint64(l.Order.Uint32(b))
		}
		return l.Order.Uint64(b)
	}
	p := l.PtrSize
	if p != 4 {
		p = 8
	}
	out := make([]rawEntry, n)
	for i := range out {
		e := b[i*size:]
		out[i] = rawEntry{host: word(e), exe: word(e[p:]), pid: int32(l.Order.Uint32(e[2*p:]))}
	}
	return out, nil
}

// ReadTable reads MPIR_proctable_size and MPIR_proctable at the given addresses, then every
// host and executable string (launchers may share one string between entries; each distinct
// pointer is read once), in the launcher's byte order and pointer size (l).
func ReadTable(ctx context.Context, mem Memory, l procimage.Layout, tableAddr, sizeAddr uint64) ([]Proc, error) {
	if l.PtrSize != 4 {
		l.PtrSize = 8
	}
	order := l.Order
	sb, err := mem.ReadMemory(ctx, sizeAddr, 4)
	if err != nil {
		return nil, fmt.Errorf("mpir: read MPIR_proctable_size at %#x: %w", sizeAddr, err)
	}
	n := int(int32(order.Uint32(sb)))
	if n < 0 || n > MaxProcs {
		return nil, fmt.Errorf("mpir: MPIR_proctable_size is %d", n)
	}
	if n == 0 {
		return nil, nil
	}
	pb, err := mem.ReadMemory(ctx, tableAddr, l.PtrSize)
	if err != nil {
		return nil, fmt.Errorf("mpir: read MPIR_proctable at %#x: %w", tableAddr, err)
	}
	ptr := uint64(order.Uint32(pb))
	if l.PtrSize == 8 {
		ptr = order.Uint64(pb)
	}
	if ptr == 0 {
		return nil, fmt.Errorf("mpir: MPIR_proctable is NULL with MPIR_proctable_size %d", n)
	}
	tb, err := mem.ReadMemory(ctx, ptr, n*entrySize(l.PtrSize))
	if err != nil {
		return nil, fmt.Errorf("mpir: read %d proctable entries at %#x: %w", n, ptr, err)
	}
	raw, err := parseEntries(tb, n, l)
	if err != nil {
		return nil, fmt.Errorf("mpir: %w", err)
	}
	im := image(ctx, mem, l)
	strs := map[uint64]string{}
	str := func(p uint64, what string, rank int) (string, error) {
		if p == 0 {
			return "", nil
		}
		if s, ok := strs[p]; ok {
			return s, nil
		}
		s, err := im.CString(p, maxPath)
		if err != nil {
			return "", fmt.Errorf("mpir: proctable rank %d: %s at %#x: %w", rank, what, p, err)
		}
		strs[p] = s
		return s, nil
	}
	procs := make([]Proc, n)
	for i, e := range raw {
		host, err := str(e.host, "host_name", i)
		if err != nil {
			return nil, err
		}
		exe, err := str(e.exe, "executable_name", i)
		if err != nil {
			return nil, err
		}
		procs[i] = Proc{Rank: i, Host: host, Executable: exe, Pid: int(e.pid)}
	}
	return procs, nil
}
