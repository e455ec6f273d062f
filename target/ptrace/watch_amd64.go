//go:build linux

package ptrace

import (
	"fmt"
	"math/bits"

	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

// x86 debug registers, reached with PTRACE_PEEKUSER/POKEUSER at offsetof(struct user,
// u_debugreg) + 8*n. DR0-DR3 hold addresses, DR6 says which fired, DR7 enables them: local
// enable bit 2n, and at bit 16+4n two bits of access (01 write, 11 read or write; x86 has no
// read-only data watch) and two of length (00 1 byte, 01 2, 11 4, 10 8).
const offDebugReg = 848

func drOff(n int) uintptr { return offDebugReg + uintptr(n)*8 }

// watchState mirrors what the tracer put in a thread's debug registers.
type watchState struct {
	addr [4]uint64
	dr7  uint64
}

func slotBits(slot int) uint64 { return 3<<(2*slot) | 0xf<<(16+4*slot) }

func (th *thread) setWatch(slot int, addr uint64, size int, kind target.WatchKind) error {
	if slot < 0 || slot >= archFacts.WatchSlots {
		return fmt.Errorf("slot %d outside 0..%d: %w", slot, archFacts.WatchSlots-1, unix.EINVAL)
	}
	var rw uint64
	switch kind {
	case target.WatchWrite:
		rw = 1
	case target.WatchReadWrite:
		rw = 3
	case target.WatchRead:
		return fmt.Errorf("x86 cannot watch reads alone: %w", target.ErrUnsupported)
	default:
		return fmt.Errorf("watch kind %d: %w", kind, unix.EINVAL)
	}
	var ln uint64
	switch size {
	case 1:
		ln = 0
	case 2:
		ln = 1
	case 4:
		ln = 3
	case 8:
		ln = 2
	default:
		return fmt.Errorf("size %d is not 1, 2, 4 or 8: %w", size, unix.EINVAL)
	}
	if addr%uint64(size) != 0 {
		return fmt.Errorf("address not aligned to %d: %w", size, target.ErrAddress)
	}
	// Disarm the slot before changing its address, then arm it with the new condition.
	dr7 := th.watch.dr7 &^ slotBits(slot)
	if dr7 != th.watch.dr7 {
		if err := pokeUser(th.tid, drOff(7), dr7); err != nil {
			return err
		}
		th.watch.dr7 = dr7
	}
	if err := pokeUser(th.tid, drOff(slot), addr); err != nil {
		if err == unix.EINVAL || err == unix.EIO {
			return fmt.Errorf("%w (%w)", target.ErrAddress, err)
		}
		return err
	}
	th.watch.addr[slot] = addr
	dr7 |= 1<<(2*slot) | (rw|ln<<2)<<(16+4*slot)
	if err := pokeUser(th.tid, drOff(7), dr7); err != nil {
		return err
	}
	th.watch.dr7 = dr7
	return nil
}

func (th *thread) clearWatch(slot int) error {
	if slot < 0 || slot >= archFacts.WatchSlots {
		return fmt.Errorf("slot %d outside 0..%d: %w", slot, archFacts.WatchSlots-1, unix.EINVAL)
	}
	dr7 := th.watch.dr7 &^ slotBits(slot)
	if dr7 != th.watch.dr7 {
		if err := pokeUser(th.tid, drOff(7), dr7); err != nil {
			return err
		}
	}
	th.watch.dr7 = dr7
	th.watch.addr[slot] = 0
	return nil
}

// clearAllWatch disarms every debug register the tracer set (at detach).
func (th *thread) clearAllWatch() {
	if th.watch.dr7 != 0 || th.ranDR {
		pokeUser(th.tid, drOff(7), 0) // a walk's run's breakpoint too, should one be left armed
	}
	for i, a := range th.watch.addr {
		if a != 0 {
			pokeUser(th.tid, drOff(i), 0)
		}
	}
	th.watch = watchState{}
}

// takeDR6 reads and clears DR6 and returns the lowest armed slot whose condition was met.
func (th *thread) takeDR6() (int, bool) {
	dr6, err := peekUser(th.tid, drOff(6))
	if err != nil {
		return 0, false
	}
	pokeUser(th.tid, drOff(6), 0)
	hit := dr6 & 0xf
	for s := 0; s < 4; s++ {
		if th.watch.dr7&(1<<(2*s)) == 0 {
			hit &^= 1 << s
		}
	}
	if hit == 0 {
		return 0, false
	}
	return bits.TrailingZeros64(hit), true
}
