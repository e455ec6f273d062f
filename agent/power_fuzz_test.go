package agent

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/target"
)

// imageProcess is a stopped Power thread made of a memory image and a pt_regs, for fuzzing
// the back-chain walk. Only the methods the walk uses are implemented.
type imageProcess struct {
	target.Process
	base  uint64
	mem   []byte
	regs  []byte
	order binary.ByteOrder
}

func (m *imageProcess) ReadMemory(addr uint64, b []byte) (int, error) {
	if addr < m.base || addr-m.base >= uint64(len(m.mem)) {
		return 0, target.ErrAddress
	}
	n := copy(b, m.mem[addr-m.base:])
	if n < len(b) {
		return n, target.ErrAddress
	}
	return n, nil
}

func (m *imageProcess) Registers(tid int, set target.RegSet) ([]byte, error) {
	return append([]byte(nil), m.regs...), nil
}

// depth2Code and depth3Code are the words gcc 12 (-O0, ELFv1) emits for a function that
// calls another and for a leaf: the seeds' code.
var (
	depth2Code = []uint32{0x7c0802a6, 0xf8010010, 0xfbe1fff8, 0xf821ff81, 0x7c3f0b78, 0xf87f00b0,
		0xe93f00b0, 0x39290001, 0x7d234b78, 0x4bffff99, 0x7c691b78, 0x39290001, 0x7d234b78,
		0x383f0080, 0xe8010010, 0x7c0803a6, 0xebe1fff8, 0x4e800020}
	depth3Code = []uint32{0xfbe1fff8, 0xf821ffc1, 0x7c3f0b78, 0xf87f0070, 0xe93f0070, 0x792a0fa4,
		0x60000000, 0x3922a3b8, 0xe9290000, 0x7d2a4a14, 0x7d234b78, 0x383f0040, 0xebe1fff8,
		0x4e800020}
)

// FuzzPowerTraceback: any stack and code memory and any registers give a walk of at most the
// frames asked for, starting at the pc and going up the stack; never a panic. Seeded with
// compiled code (a caller and a leaf) and a well-formed back chain, stopped at several places
// of the two functions, in both byte orders.
func FuzzPowerTraceback(f *testing.F) {
	const base = 0x10000
	for _, order := range []binary.ByteOrder{binary.BigEndian, binary.LittleEndian} {
		var img []byte
		for _, w := range append(append([]uint32(nil), depth2Code...), depth3Code...) {
			img = append(img, ppc64.PutWord(order, w)...)
		}
		depth3 := uint64(base + 4*len(depth2Code))
		sp := uint64(base + len(img))
		stack := make([]byte, 3*64)
		for i := 0; i < 3; i++ {
			next := sp + 64*uint64(i+1)
			if i == 2 {
				next = 0
			}
			order.PutUint64(stack[64*i:], next)
			order.PutUint64(stack[64*i+16:], base+40+uint64(8*i))
		}
		mem := append(img, stack...)
		for _, pc := range []uint64{base, base + 16, base + 40, depth3, depth3 + 8, depth3 + 48} {
			var regs ppc64.PtRegs
			regs.NIP, regs.GPR[1], regs.Link = pc, sp, base+40
			f.Add(mem, regs.Marshal(order), order == binary.BigEndian, uint16(8))
		}
	}
	f.Fuzz(func(t *testing.T, mem, regs []byte, big bool, max uint16) {
		order := binary.ByteOrder(binary.LittleEndian)
		if big {
			order = binary.BigEndian
		}
		if len(regs) != ppc64.PtRegsSize {
			regs = append(regs, make([]byte, ppc64.PtRegsSize)...)[:ppc64.PtRegsSize]
		}
		p := &proc{bps: map[uint64]*breakpoint{}, info: target.Info{Machine: elf.EM_PPC64, ByteOrder: order}}
		p.tp = &imageProcess{base: 0x10000, mem: mem, regs: regs, order: order}
		limit := int(max%512) + 1
		frames, err := p.powerTraceback(1, limit)
		if err != nil {
			t.Fatal(err)
		}
		var r ppc64.PtRegs
		r.Unmarshal(regs, order)
		if len(frames) == 0 || len(frames) > limit || frames[0].PC != r.NIP {
			t.Fatalf("%d frames (limit %d), first %+v, pc %#x", len(frames), limit, frames, r.NIP)
		}
		// The walk goes on only up the stack: every frame but the last is above its callee.
		for i := 1; i < len(frames)-1; i++ {
			if frames[i].CFA <= frames[i-1].CFA {
				t.Fatalf("frame %d CFA %#x not above frame %d's %#x", i, frames[i].CFA, i-1, frames[i-1].CFA)
			}
		}
	})
}
