package mpir

import (
	"context"
	"fmt"
	"io"

	"github.com/hpcdap/hpcdap/procimage"
)

// Memory reads a process's memory (the launcher's, through its agent).
type Memory interface {
	// ReadMemory returns exactly n bytes at addr, or an error.
	ReadMemory(ctx context.Context, addr uint64, n int) ([]byte, error)
}

// Auxv is a process's auxiliary vector, key → value.
type Auxv = procimage.Auxv

// Object is one ELF object loaded in a process.
type Object = procimage.Object

// maxPath bounds the strings read from the launcher.
const maxPath = procimage.MaxPath

// image is the launcher's memory as procimage reads it, bound to ctx.
func image(ctx context.Context, mem Memory, l procimage.Layout) procimage.Image {
	return procimage.Image{Mem: ctxMemory{ctx, mem}, Layout: l}
}

// ctxMemory turns a Memory into the ReadAt form procimage reads through.
type ctxMemory struct {
	ctx context.Context
	mem Memory
}

func (m ctxMemory) ReadAt(p []byte, addr uint64) (int, error) {
	b, err := m.mem.ReadMemory(m.ctx, addr, len(p))
	if err != nil {
		return 0, err
	}
	if n := copy(p, b); n < len(p) {
		return n, io.ErrUnexpectedEOF
	}
	return len(p), nil
}

// Objects lists the ELF objects loaded in a process, the executable (named exe) first, by
// walking the dynamic linker's link map (procimage.Image.Objects).
func Objects(ctx context.Context, mem Memory, l procimage.Layout, aux Auxv, exe string) ([]Object, error) {
	objs, err := image(ctx, mem, l).Objects(aux, exe)
	if err != nil {
		return nil, fmt.Errorf("mpir: objects: %w", err)
	}
	return objs, nil
}
