package threaddb

import (
	"encoding/binary"
	"fmt"
)

// DescPrefix begins the name of every descriptor symbol glibc exports for thread debuggers.
const DescPrefix = "_thread_db_"

// Desc is one decoded glibc descriptor triple: where a field or variable lives and how wide it is.
//
// glibc writes each as three 32-bit words in the target's byte order: the size in bits of one
// element, the element count, and the byte offset from the start of the structure (0 for a
// variable). In the register descriptors (_thread_db_register64 and _thread_db_register32) the
// count word is the signed bias added to the register's value; see Bias.
type Desc struct {
	Bits   uint32 // size of one element in bits
	Count  uint32 // number of elements (1 for a scalar; 0 for a flexible array member)
	Offset uint32 // byte offset of element 0
}

// DescSize is the size in bytes of an encoded Desc.
const DescSize = 12

// DecodeDesc decodes a descriptor triple stored in the given byte order.
//
// It rejects triples glibc's own reader would reject: a zero size, and a size word with any of its
// top 8 bits set, which glibc takes as the sign of a byte-swapped descriptor. Since the byte order
// here comes from the ELF header, such a word means the data is not a descriptor.
func DecodeDesc(b []byte, order binary.ByteOrder) (Desc, error) {
	if len(b) != DescSize {
		return Desc{}, fmt.Errorf("threaddb: decode descriptor: %d bytes, want %d", len(b), DescSize)
	}
	d := Desc{
		Bits:   order.Uint32(b[0:]),
		Count:  order.Uint32(b[4:]),
		Offset: order.Uint32(b[8:]),
	}
	if d.Bits == 0 {
		return Desc{}, fmt.Errorf("threaddb: decode descriptor: element size is 0")
	}
	if d.Bits&0xff000000 != 0 {
		return Desc{}, fmt.Errorf("threaddb: decode descriptor: element size %#x bits looks byte-swapped", d.Bits)
	}
	return d, nil
}

// Bytes is the size of one element in bytes.
func (d Desc) Bytes() uint64 { return uint64(d.Bits) / 8 }

// Bias is the count word read as the signed bias of a register descriptor.
func (d Desc) Bias() int64 { return int64(int32(d.Count)) }

// Scalar reports whether an element is a value this package can load: 8, 16, 32 or 64 bits.
func (d Desc) Scalar() bool {
	switch d.Bits {
	case 8, 16, 32, 64:
		return true
	}
	return false
}

// ElemAddr returns the address of element idx of the field at base, checking idx against the
// element count as glibc does (a count of 0 means unbounded).
func (d Desc) ElemAddr(base, idx uint64) (uint64, error) {
	if d.Bits%8 != 0 {
		return 0, fmt.Errorf("threaddb: descriptor element size %d bits is not a whole number of bytes", d.Bits)
	}
	if d.Count != 0 && idx >= uint64(d.Count) {
		return 0, fmt.Errorf("threaddb: index %d out of range for %d elements", idx, d.Count)
	}
	return base + uint64(d.Offset) + idx*d.Bytes(), nil
}

// String formats the triple as glibc's source writes it.
func (d Desc) String() string { return fmt.Sprintf("{%d, %d, %d}", d.Bits, d.Count, d.Offset) }

// loadScalar decodes a value of the descriptor's width from b, zero-extended.
func loadScalar(b []byte, bits uint32, order binary.ByteOrder) (uint64, error) {
	need := int(bits / 8)
	if len(b) < need {
		return 0, fmt.Errorf("threaddb: %d-bit value needs %d bytes, have %d", bits, need, len(b))
	}
	switch bits {
	case 8:
		return uint64(b[0]), nil
	case 16:
		return uint64(order.Uint16(b)), nil
	case 32:
		return uint64(order.Uint32(b)), nil
	case 64:
		return order.Uint64(b), nil
	}
	return 0, fmt.Errorf("threaddb: cannot load a %d-bit value", bits)
}
