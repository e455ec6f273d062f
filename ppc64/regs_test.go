package ppc64

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
)

// ptRegsLayoutSource records the kernel's pt_regs and elf_fpregset_t layout, as the cross
// compiler's headers define them, in a data array.
const ptRegsLayoutSource = `#include <stddef.h>
#include <asm/ptrace.h>
#include <sys/procfs.h>
#define O(f) offsetof(struct pt_regs, f)
unsigned long layout[] = {
	sizeof(struct pt_regs), sizeof(elf_fpregset_t),
	O(gpr[0]), O(gpr[13]), O(gpr[31]), O(nip), O(msr), O(orig_gpr3), O(ctr), O(link), O(xer),
	O(ccr), O(softe), O(trap), O(dar), O(dsisr), O(result),
};
`

// TestPtRegsLayoutAgainstHeaders checks PtRegs' byte layout against offsetof in the target's
// kernel headers, compiled by the cross compiler, for both byte orders.
func TestPtRegsLayoutAgainstHeaders(t *testing.T) {
	for _, a := range []crossArch{archBE, archLE} {
		dir := t.TempDir()
		obj := a.compile(t, dir, "layout", ptRegsLayoutSource, "-c")
		f, err := elf.Open(obj)
		if err != nil {
			t.Fatal(err)
		}
		data, err := f.Section(".data").Data()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		word := func(i int) uint64 { return f.ByteOrder.Uint64(data[8*i:]) }
		if word(0) != PtRegsSize || word(1) != FPRegsSize {
			t.Errorf("%s: sizeof pt_regs %d, elf_fpregset_t %d; package %d, %d", a.name, word(0), word(1), PtRegsSize, FPRegsSize)
		}
		// Mark each field with its own index, marshal, and find each mark at the header's offset.
		var r PtRegs
		for i, p := range r.Words() {
			*p = uint64(i) + 0x1000
		}
		b := r.Marshal(f.ByteOrder)
		fields := []int{0, 13, 31, PtNIP, PtMSR, PtOrigGPR3, PtCTR, PtLink, PtXER, PtCCR, PtSoftE, PtTrap, PtDAR, PtDSISR, PtResult}
		for k, idx := range fields {
			off := word(2 + k)
			if got := f.ByteOrder.Uint64(b[off:]); got != uint64(idx)+0x1000 {
				t.Errorf("%s: field %d: header offset %d holds register %#x", a.name, idx, off, got-0x1000)
			}
		}
		var back PtRegs
		if err := back.Unmarshal(b, f.ByteOrder); err != nil || back != r {
			t.Errorf("%s: round trip: %v", a.name, err)
		}
	}
	if err := new(PtRegs).Unmarshal(make([]byte, 10), binary.BigEndian); err == nil {
		t.Error("short pt_regs accepted")
	}
	if err := new(FPRegs).Unmarshal(make([]byte, 10), binary.BigEndian); err == nil {
		t.Error("short fpregs accepted")
	}
}

// TestBGQConversions checks that pt_regs and the BG/Q register sets carry each register to
// its counterpart and back.
func TestBGQConversions(t *testing.T) {
	var gpr [32]uint64
	for i := range gpr {
		gpr[i] = uint64(i) * 0x0101010101
	}
	s := cdti.SpecialRegs{IAR: 0x10000994, LR: 0x10000ca0, MSR: 0x9000000102806900, CR: 0x28000222,
		CTR: 0x10000994, XER: 0x20040000, FPSCR: 0x82004000, DEAR: 0xdead0000, ESR: 0x800000}
	p := PtRegsFromBGQ(gpr, s)
	if p.NIP != s.IAR || p.Link != s.LR || p.MSR != s.MSR || p.CCR != s.CR || p.CTR != s.CTR ||
		p.XER != s.XER || p.DAR != s.DEAR || p.DSISR != s.ESR || p.GPR != gpr {
		t.Errorf("PtRegsFromBGQ = %+v", p)
	}
	g2, s2 := p.BGQ(s.FPSCR)
	if g2 != gpr || s2 != s {
		t.Errorf("BGQ round trip: %+v", s2)
	}
	var q [32]cdti.QPX
	for i := range q {
		q[i] = cdti.QPX{uint64(i), 0xa, 0xb, 0xc}
	}
	fp := FPRegsFromBGQ(q, s.FPSCR)
	if fp.FPR[5] != 5 || fp.FPSCR != s.FPSCR {
		t.Errorf("FPRegsFromBGQ = %+v", fp)
	}
	fp.FPR[5] = 0x4000000000000000
	q2 := fp.BGQ(q)
	if q2[5] != (cdti.QPX{0x4000000000000000, 0xa, 0xb, 0xc}) || q2[6] != q[6] {
		t.Errorf("FPRegs.BGQ = %v", q2[5])
	}
	var back FPRegs
	if err := back.Unmarshal(fp.Marshal(binary.LittleEndian), binary.LittleEndian); err != nil || back != fp {
		t.Errorf("fpregs round trip: %v", err)
	}
	if MSRByteOrder(0x9000000102806901) != binary.LittleEndian || MSRByteOrder(0x9000000102806900) != binary.BigEndian {
		t.Error("MSRByteOrder")
	}

}
