package symbols

import (
	"debug/elf"
	"encoding/binary"
	"fmt"

	"github.com/hpcdap/hpcdap/arch"
)

// Arch describes the machine facts the symbol layer needs: byte order, pointer size and the
// DWARF register numbering of the architecture. It is the machine's one description,
// arch.Arch.
type Arch = arch.Arch

// ArchFor returns the Arch of an ELF machine and byte order, or an error for machines the
// package does not support.
func ArchFor(m elf.Machine, order binary.ByteOrder) (*Arch, error) {
	a, err := arch.For(m, order)
	if err != nil {
		return nil, fmt.Errorf("symbols: %w", err)
	}
	return a, nil
}
