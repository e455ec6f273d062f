// Package procimage reads what the kernel and the dynamic linker leave in a process image for
// debuggers: the auxiliary vector, the program headers it points to, the dynamic section's
// DT_DEBUG entry, the dynamic linker's r_debug and its link map, and C strings; and, from
// /proc/TID/status, the kernel's account of a thread (Status). Everything in the image is
// read through a small memory interface and decoded in the process's pointer size (4 or 8
// bytes) and byte order, so one reader serves a 64-bit little-endian rank read over CDTI, a
// big-endian Power process under QEMU and a launcher read through its agent.
//
// The package imports only the standard library: the adapter, package symbols' users,
// launch/mpir, the ptrace back end and the PMIx tool share it.
package procimage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Memory reads a process's address space. ReadAt reads len(p) bytes at addr; a short read
// returns an error, as io.ReaderAt does.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Layout is how a process stores words: its byte order and pointer size.
type Layout struct {
	Order   binary.ByteOrder
	PtrSize int // 4 or 8
}

// check reports a layout this package cannot decode.
func (l Layout) check() error {
	if l.Order == nil {
		return errors.New("procimage: layout has no byte order")
	}
	if l.PtrSize != 4 && l.PtrSize != 8 {
		return fmt.Errorf("procimage: pointer size %d (want 4 or 8)", l.PtrSize)
	}
	return nil
}

// word decodes one pointer-sized word at the start of b.
func (l Layout) word(b []byte) uint64 {
	if l.PtrSize == 4 {
		return uint64(l.Order.Uint32(b))
	}
	return l.Order.Uint64(b)
}

// Image is a process image: memory and the layout its words are in.
type Image struct {
	Mem Memory
	Layout
}

// read returns n bytes at addr; fewer is an error (io.ErrUnexpectedEOF), whatever the memory
// says of it.
func (im Image) read(addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	got, err := im.Mem.ReadAt(b, addr)
	if err == nil && got < n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Word reads one pointer-sized word at addr.
func (im Image) Word(addr uint64) (uint64, error) {
	if err := im.check(); err != nil {
		return 0, err
	}
	b, err := im.read(addr, im.PtrSize)
	if err != nil {
		return 0, fmt.Errorf("procimage: read word at %#x: %w", addr, err)
	}
	return im.word(b), nil
}

// pageSize is the granule string reads stay within: a string that ends just before an
// unmapped page reads without touching it.
const pageSize = 4096

// CString reads the NUL-terminated string at addr, of at most max bytes before the NUL. A
// null pointer reads as the empty string. Reads never cross a 4 KiB boundary, so a string at
// the very end of a mapping reads as well as any other; a string without a NUL in max bytes
// is an error.
func (im Image) CString(addr uint64, max int) (string, error) {
	if addr == 0 {
		return "", nil
	}
	start := addr
	var out []byte
	for len(out) <= max {
		n := min(int(pageSize-addr%pageSize), max+1-len(out), 512)
		b, err := im.read(addr, n)
		if err != nil {
			return "", fmt.Errorf("procimage: read string at %#x: %w", start, err)
		}
		for i, c := range b {
			if c == 0 {
				return string(append(out, b[:i]...)), nil
			}
		}
		out = append(out, b...)
		addr += uint64(n)
	}
	return "", fmt.Errorf("procimage: string at %#x longer than %d bytes", start, max)
}
