package symbols

import (
	"encoding/binary"
	"errors"
)

var errShort = errors.New("data truncated")

// byteReader decodes DWARF primitives; the first failure sticks in err.
type byteReader struct {
	b     []byte
	off   int
	order binary.ByteOrder
	err   error
}

func (r *byteReader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || r.off+n > len(r.b) || r.off+n < r.off {
		r.err = errShort
		return false
	}
	return true
}

func (r *byteReader) u8() byte {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *byteReader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := r.order.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *byteReader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := r.order.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *byteReader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := r.order.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *byteReader) addr(size int) uint64 {
	if size == 4 {
		return uint64(r.u32())
	}
	return r.u64()
}

func (r *byteReader) bytes(n int) []byte {
	if !r.need(n) {
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *byteReader) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		if !r.need(1) {
			return 0
		}
		c := r.b[r.off]
		r.off++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			return v
		}
	}
}
