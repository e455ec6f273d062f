package ppc64

import (
	"fmt"
	"strings"

	"golang.org/x/arch/ppc64/ppc64asm"
)

// format spells d as GNU objdump does. ppc64asm's GNU syntax is the base; the rules below add
// the extended mnemonics binutils prefers and objdump's spelling of operands.
func format(d ppc64asm.Inst, pc uint64) string {
	if d.Len == 4 {
		if s, ok := extendedMnemonic(d.Enc); ok {
			return s
		}
		if s, ok := vectorMnemonic(d); ok {
			return s
		}
	}
	text := ppc64asm.GNUSyntax(d, pc)
	// A branch to itself: ppc64asm writes ".+0x0"; objdump writes the address.
	if strings.HasSuffix(text, ".+0x0") {
		text = strings.TrimSuffix(text, ".+0x0") + fmt.Sprintf("%#x", pc)
	}
	if idx := raZeroIndex(d); idx >= 0 {
		text = zeroRA(text, idx)
	}
	return text
}

// extendedMnemonic returns objdump's spelling of w when binutils prints it with an extended
// mnemonic that ppc64asm does not produce.
func extendedMnemonic(w uint32) (string, bool) {
	rs, ra, rb := w>>21&31, w>>16&31, w>>11&31
	dot := ""
	if w&1 != 0 {
		dot = "."
	}
	switch w >> 26 {
	case opcodeTDI, opcodeTWI:
		t, _ := DecodeTrap(w)
		return t.String(), true
	case 17: // sc
		if w == 0x44000002 {
			return "sc", true
		}
	case 21: // rlwinm
		return rlwinm(rs, ra, rb, w>>6&31, w>>1&31, dot), true
	case 30: // MD-form rotates; the 6-bit mask field is stored as mb[0:4] || mb[5]
		sh := rb | (w>>1&1)<<5
		m := w>>6&31 | (w>>5&1)<<5
		switch w >> 2 & 7 {
		case 0:
			return rldicl(rs, ra, sh, m, dot), true
		case 1:
			return rldicr(rs, ra, sh, m, dot), true
		}
	case opcodeX:
		switch xo := w >> 1 & 0x3ff; xo {
		case xoTW, xoTD:
			t, _ := DecodeTrap(w)
			return t.String(), true
		case 444: // or
			if rs == rb {
				if name, ok := orHint[rs]; ok && rs == ra && w&1 == 0 {
					return name, true
				}
				return fmt.Sprintf("mr%s r%d,r%d", dot, ra, rs), true
			}
		case 124: // nor
			if rs == rb {
				return fmt.Sprintf("not%s r%d,r%d", dot, ra, rs), true
			}
		case 144: // mtcrf (mtocrf has bit 11 set)
			if w>>20&1 == 0 && w>>12&0xff == 0xff {
				return fmt.Sprintf("mtcr r%d", rs), true
			}
		case 339, 467: // mfspr, mtspr; the SPR number is stored with its halves swapped
			spr := w>>16&31 | (w>>11&31)<<5
			if xo == 339 {
				if name, ok := sprName[spr]; ok {
					return fmt.Sprintf("mf%s r%d", name, rs), true
				}
				break
			}
			if spr == sprTB || spr == sprTBU {
				// The time base is read-only to programs: binutils has no mttb, mttbu.
				return fmt.Sprintf("mtspr %d,r%d", spr, rs), true
			}
			if name, ok := sprName[spr]; ok {
				return fmt.Sprintf("mt%s r%d", name, rs), true
			}
		}
	}
	return "", false
}

// orHint names the `or rN,rN,rN` forms that binutils spells as hints.
var orHint = map[uint32]string{26: "miso", 27: "yield", 29: "mdoio", 30: "mdoom"}

// Time-base SPR numbers (read with mfspr).
const (
	sprTB  = 268
	sprTBU = 269
)

// sprName holds the user-level special-purpose registers that objdump names in mfspr/mtspr
// (the ones ppc64asm already names — xer, lr, ctr, tb — are absent).
var sprName = map[uint32]string{
	3:      "udscr",
	13:     "uamr",
	256:    "vrsave",
	sprTBU: "tbu",
	815:    "tar",
	896:    "ppr",
}

// rlwinm spells rlwinm rA,rS,SH,MB,ME with binutils' extended mnemonics.
func rlwinm(rs, ra, sh, mb, me uint32, dot string) string {
	switch {
	case mb == 0 && me == 31:
		return fmt.Sprintf("rotlwi%s r%d,r%d,%d", dot, ra, rs, sh)
	case sh == 0 && me == 31:
		return fmt.Sprintf("clrlwi%s r%d,r%d,%d", dot, ra, rs, mb)
	case mb == 0 && sh != 0 && me == 31-sh:
		return fmt.Sprintf("slwi%s r%d,r%d,%d", dot, ra, rs, sh)
	case me == 31 && mb != 0 && sh == 32-mb:
		return fmt.Sprintf("srwi%s r%d,r%d,%d", dot, ra, rs, mb)
	case sh == 0 && mb == 0:
		return fmt.Sprintf("clrrwi%s r%d,r%d,%d", dot, ra, rs, 31-me)
	}
	return fmt.Sprintf("rlwinm%s r%d,r%d,%d,%d,%d", dot, ra, rs, sh, mb, me)
}

// rldicl spells rldicl rA,rS,SH,MB with binutils' extended mnemonics.
func rldicl(rs, ra, sh, mb uint32, dot string) string {
	switch {
	case mb == 0:
		return fmt.Sprintf("rotldi%s r%d,r%d,%d", dot, ra, rs, sh)
	case sh == 0:
		return fmt.Sprintf("clrldi%s r%d,r%d,%d", dot, ra, rs, mb)
	case sh == 64-mb:
		return fmt.Sprintf("srdi%s r%d,r%d,%d", dot, ra, rs, mb)
	}
	return fmt.Sprintf("rldicl%s r%d,r%d,%d,%d", dot, ra, rs, sh, mb)
}

// rldicr spells rldicr rA,rS,SH,ME with binutils' extended mnemonics.
func rldicr(rs, ra, sh, me uint32, dot string) string {
	switch {
	case sh == 0:
		return fmt.Sprintf("clrrdi%s r%d,r%d,%d", dot, ra, rs, 63-me)
	case me == 63-sh:
		return fmt.Sprintf("sldi%s r%d,r%d,%d", dot, ra, rs, sh)
	}
	return fmt.Sprintf("rldicr%s r%d,r%d,%d,%d", dot, ra, rs, sh, me)
}

// vectorMnemonic spells the vector, VSX and cache-hint instructions that binutils prints with
// extended mnemonics.
func vectorMnemonic(d ppc64asm.Inst) (string, bool) {
	a := d.Args
	switch d.Op {
	case ppc64asm.VOR, ppc64asm.VNOR, ppc64asm.XXLOR, ppc64asm.XXLNOR:
		if a[1] != a[2] {
			return "", false
		}
		name := map[ppc64asm.Op]string{ppc64asm.VOR: "vmr", ppc64asm.VNOR: "vnot",
			ppc64asm.XXLOR: "xxmr", ppc64asm.XXLNOR: "xxlnot"}[d.Op]
		return fmt.Sprintf("%s %v,%v", name, a[0], a[1]), true
	case ppc64asm.XXPERMDI:
		dm, _ := a[3].(ppc64asm.Imm)
		switch {
		case a[1] == a[2] && (dm == 0 || dm == 3):
			return fmt.Sprintf("xxspltd %v,%v,%d", a[0], a[1], dm&1), true
		case a[1] == a[2] && dm == 2:
			return fmt.Sprintf("xxswapd %v,%v", a[0], a[1]), true
		case dm == 0:
			return fmt.Sprintf("xxmrghd %v,%v,%v", a[0], a[1], a[2]), true
		case dm == 3:
			return fmt.Sprintf("xxmrgld %v,%v,%v", a[0], a[1], a[2]), true
		}
	case ppc64asm.MFVSRD, ppc64asm.MFVSRWZ: // GPR ← VSR: named after the FPR or VR it overlays
		base := map[ppc64asm.Op]string{ppc64asm.MFVSRD: "d", ppc64asm.MFVSRWZ: "wz"}[d.Op]
		class, reg := overlaid(a[1])
		return fmt.Sprintf("mf%sr%s %v,%s", class, base, a[0], reg), true
	case ppc64asm.MTVSRD, ppc64asm.MTVSRWA, ppc64asm.MTVSRWZ: // VSR ← GPR
		base := map[ppc64asm.Op]string{ppc64asm.MTVSRD: "d", ppc64asm.MTVSRWA: "wa",
			ppc64asm.MTVSRWZ: "wz"}[d.Op]
		class, reg := overlaid(a[0])
		return fmt.Sprintf("mt%sr%s %s,%v", class, base, reg, a[1]), true
	case ppc64asm.DCBT, ppc64asm.DCBTST:
		// TH = 0 is the "touch, current" hint and TH = 16 the "transient" one.
		if th, ok := a[2].(ppc64asm.Imm); ok && (th == 0 || th == 16) {
			hint := map[ppc64asm.Imm]string{0: "ct", 16: "t"}[th]
			return fmt.Sprintf("%s%s %s,%v", d.Op, hint, raText(a[0]), a[1]), true
		}
	case ppc64asm.DCBF:
		// L = 0 flushes the block everywhere (dcbf), L = 1 locally (dcbfl).
		if l, ok := a[2].(ppc64asm.Imm); ok && (l == 0 || l == 1) {
			name := map[ppc64asm.Imm]string{0: "dcbf", 1: "dcbfl"}[l]
			return fmt.Sprintf("%s %s,%v", name, raText(a[0]), a[1]), true
		}
	}
	return "", false
}

// overlaid names the floating-point or vector register a VSX register overlays: vs0–vs31 are
// f0–f31, vs32–vs63 are v0–v31.
func overlaid(arg ppc64asm.Arg) (class, reg string) {
	r, ok := arg.(ppc64asm.Reg)
	if !ok || r < ppc64asm.VS0 || r > ppc64asm.VS63 {
		return "vs", fmt.Sprint(arg)
	}
	n := int(r - ppc64asm.VS0)
	if n < 32 {
		return "fp", fmt.Sprintf("f%d", n)
	}
	return "v", fmt.Sprintf("v%d", n-32)
}

// raText spells an (RA|0) operand.
func raText(arg ppc64asm.Arg) string {
	if r, ok := arg.(ppc64asm.Reg); ok && r == ppc64asm.R0 {
		return "0"
	}
	return fmt.Sprint(arg)
}

// raZeroIndex returns the position of d's (RA|0) base-register operand when it holds r0,
// which the ISA reads as the value 0 and objdump spells "0", or -1. ppc64asm spells it so for
// the plain loads and stores but not for these X-form storage instructions.
func raZeroIndex(d ppc64asm.Inst) int {
	idx := 1
	switch d.Op {
	case ppc64asm.STBCXCC, ppc64asm.STHCXCC, ppc64asm.STWCXCC, ppc64asm.STDCXCC, ppc64asm.STQCXCC,
		ppc64asm.LQARX,
		ppc64asm.LHBRX, ppc64asm.LWBRX, ppc64asm.LDBRX, ppc64asm.STHBRX, ppc64asm.STWBRX, ppc64asm.STDBRX,
		ppc64asm.LFSX, ppc64asm.LFDX, ppc64asm.LFIWAX, ppc64asm.LFIWZX, ppc64asm.STFSX, ppc64asm.STFDX,
		ppc64asm.STFIWX, ppc64asm.LSWX, ppc64asm.STSWX, ppc64asm.LSWI, ppc64asm.STSWI,
		ppc64asm.LVX, ppc64asm.LVXL, ppc64asm.STVX, ppc64asm.STVXL, ppc64asm.LVSL, ppc64asm.LVSR,
		ppc64asm.LVEBX, ppc64asm.LVEHX, ppc64asm.LVEWX, ppc64asm.STVEBX, ppc64asm.STVEHX, ppc64asm.STVEWX,
		ppc64asm.LXVD2X, ppc64asm.STXVD2X, ppc64asm.LXVW4X, ppc64asm.STXVW4X, ppc64asm.LXSDX,
		ppc64asm.STXSDX, ppc64asm.LXVX, ppc64asm.STXVX, ppc64asm.LXVDSX, ppc64asm.LXSIWZX,
		ppc64asm.LXSIWAX, ppc64asm.STXSIWX, ppc64asm.LXSSPX, ppc64asm.STXSSPX, ppc64asm.LXVB16X,
		ppc64asm.LXVH8X, ppc64asm.STXVB16X, ppc64asm.STXVH8X, ppc64asm.LXVL, ppc64asm.LXVLL,
		ppc64asm.LXSIBZX, ppc64asm.LXSIHZX, ppc64asm.STXSIBX, ppc64asm.STXSIHX:
	case ppc64asm.DCBZ, ppc64asm.DCBST, ppc64asm.DCBF, ppc64asm.DCBT, ppc64asm.DCBTST, ppc64asm.ICBI,
		ppc64asm.ICBT:
		idx = 0
		if d.Op == ppc64asm.ICBT {
			idx = 1
		}
	default:
		return -1
	}
	if r, ok := d.Args[idx].(ppc64asm.Reg); !ok || r != ppc64asm.R0 {
		return -1
	}
	return idx
}

// zeroRA rewrites operand idx of text, "r0", as "0".
func zeroRA(text string, idx int) string {
	sp := strings.IndexByte(text, ' ')
	if sp < 0 {
		return text
	}
	args := strings.Split(text[sp+1:], ",")
	if idx >= len(args) || args[idx] != "r0" {
		return text
	}
	args[idx] = "0"
	return text[:sp+1] + strings.Join(args, ",")
}
