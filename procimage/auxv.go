package procimage

import "fmt"

// Auxiliary-vector keys (elf.h) that debuggers read.
const (
	AtNull   = 0  // end of the vector
	AtPhdr   = 3  // run-time address of the program headers
	AtPhent  = 4  // size of one program header
	AtPhnum  = 5  // number of program headers
	AtPagesz = 6  // page size
	AtBase   = 7  // load address of the dynamic linker
	AtEntry  = 9  // the program's entry point (an .opd descriptor on ELFv1)
	AtHwcap  = 16 // machine capabilities
)

// Auxv is a process's auxiliary vector, key → value.
type Auxv map[uint64]uint64

// ParseAuxv decodes an auxiliary vector as the kernel lays it out (/proc/PID/auxv, a core
// file's NT_AUXV note, a GDB stub's qXfer:auxv): pairs of pointer-sized words, ending at
// AT_NULL or at the end of b. A trailing partial pair is an error.
func ParseAuxv(b []byte, l Layout) (Auxv, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	pair := 2 * l.PtrSize
	a := make(Auxv)
	for i := 0; i < len(b); i += pair {
		if len(b)-i < pair {
			return nil, fmt.Errorf("procimage: auxv: %d bytes left over after %d pairs", len(b)-i, i/pair)
		}
		k := l.word(b[i:])
		if k == AtNull {
			break
		}
		a[k] = l.word(b[i+l.PtrSize:])
	}
	return a, nil
}

// AuxvFromWords turns (key, value) words, as CDTI's GetAuxVectorsAck carries them, into an
// Auxv. It stops at AT_NULL.
func AuxvFromWords(words []uint64) Auxv {
	a := make(Auxv)
	for i := 0; i+1 < len(words); i += 2 {
		if words[i] == AtNull {
			break
		}
		a[words[i]] = words[i+1]
	}
	return a
}

// Entry is the program's entry point (AT_ENTRY), 0 if absent.
func (a Auxv) Entry() uint64 { return a[AtEntry] }
