package ppc64

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// mnemonicWords returns instruction words that exercise every extended-mnemonic rule of the
// package: every rlwinm, rldicl and rldicr mask, or/nor of equal registers, every trap TO
// value, mtcrf masks, named SPRs, and the vector forms.
func mnemonicWords() []uint32 {
	var ws []uint32
	for rc := uint32(0); rc < 2; rc++ {
		for sh := uint32(0); sh < 32; sh++ {
			for mb := uint32(0); mb < 32; mb++ {
				for me := uint32(0); me < 32; me++ {
					ws = append(ws, 21<<26|4<<21|3<<16|sh<<11|mb<<6|me<<1|rc)
				}
			}
		}
		for xo := uint32(0); xo < 2; xo++ {
			for sh := uint32(0); sh < 64; sh++ {
				for m := uint32(0); m < 64; m++ {
					ws = append(ws, 30<<26|4<<21|3<<16|(sh&31)<<11|(m&31)<<6|(m>>5)<<5|xo<<2|(sh>>5)<<1|rc)
				}
			}
		}
		for rs := uint32(0); rs < 32; rs++ {
			for ra := uint32(0); ra < 32; ra += 3 {
				ws = append(ws, 31<<26|rs<<21|ra<<16|rs<<11|444<<1|rc, 31<<26|rs<<21|ra<<16|rs<<11|124<<1|rc)
			}
			ws = append(ws, 31<<26|rs<<21|rs<<16|rs<<11|444<<1|rc)
		}
		ws = append(ws, 31<<26|4<<21|3<<16|5<<11|444<<1|rc) // or with distinct registers
	}
	for to := uint32(0); to < 32; to++ {
		for _, r := range [][2]uint32{{0, 0}, {2, 2}, {3, 4}, {31, 1}} {
			ws = append(ws,
				31<<26|to<<21|r[0]<<16|r[1]<<11|xoTW<<1,
				31<<26|to<<21|r[0]<<16|r[1]<<11|xoTD<<1,
				31<<26|to<<21|r[0]<<16|r[1]<<11|xoTW<<1|1,
				opcodeTWI<<26|to<<21|r[0]<<16|(r[1]*0x1111),
				opcodeTDI<<26|to<<21|r[0]<<16|0xfff0|r[1]&15)
		}
	}
	ws = append(ws, FastTrapBase, FastTrapBase|1, FastTrapBase|MaxFastTrap, TrapWordCNK, TrapWordLinux,
		0x44000002, 0x44000022) // sc, sc 1
	for _, fxm := range []uint32{0xff, 0x80, 0x01, 0x7f} {
		ws = append(ws, 31<<26|5<<21|fxm<<12|144<<1) // mtcrf
	}
	for _, fxm := range []uint32{0x80, 0x01} {
		ws = append(ws, 31<<26|5<<21|1<<20|fxm<<12|144<<1) // mtocrf: one field only
	}
	for _, spr := range []uint32{1, 3, 8, 9, 13, 256, 268, 269, 815, 896} {
		f := (spr&31)<<16 | (spr>>5)<<11
		ws = append(ws, 31<<26|7<<21|f|339<<1, 31<<26|7<<21|f|467<<1)
	}
	for _, ab := range [][2]uint32{{1, 1}, {1, 2}, {33, 33}} {
		for dm := uint32(0); dm < 4; dm++ {
			// xxpermdi XT=vs0+, XA, XB with the high bits of XA/XB in AX/BX.
			a, b := ab[0], ab[1]
			ws = append(ws, 60<<26|5<<21|(a&31)<<16|(b&31)<<11|dm<<8|10<<3|(a>>5)<<2|(b>>5)<<1)
		}
		a := ab[0] & 31
		ws = append(ws, 4<<26|5<<21|a<<16|(ab[1]&31)<<11|1156, 4<<26|5<<21|a<<16|(ab[1]&31)<<11|1284)
		ws = append(ws, 60<<26|5<<21|a<<16|(ab[1]&31)<<11|146<<3, 60<<26|5<<21|a<<16|(ab[1]&31)<<11|162<<3)
	}
	for _, vs := range []uint32{0, 31, 32, 63} {
		for _, xo := range []uint32{51, 115, 179, 211, 243} { // mfvsrd, mfvsrwz, mtvsrd, mtvsrwa, mtvsrwz
			ws = append(ws, 31<<26|(vs&31)<<21|9<<16|xo<<1|vs>>5)
		}
	}
	for _, ra := range []uint32{0, 3} {
		for _, th := range []uint32{0, 16} {
			ws = append(ws, 31<<26|th<<21|ra<<16|6<<11|278<<1, 31<<26|th<<21|ra<<16|6<<11|246<<1)
		}
		for _, l := range []uint32{0, 1} {
			ws = append(ws, 31<<26|l<<21|ra<<16|6<<11|86<<1) // dcbf
		}
		for _, xo := range []uint32{1014, 54, 982} { // dcbz, dcbst, icbi
			ws = append(ws, 31<<26|ra<<16|6<<11|xo<<1)
		}
		for _, xo := range []uint32{150, 214} { // stwcx., stdcx.
			ws = append(ws, 31<<26|5<<21|ra<<16|6<<11|xo<<1|1)
		}
		for _, xo := range []uint32{532, 983, 103, 231, 6, 38, 20, 84} { // ldbrx stfiwx lvx stvx lvsl lvsr lwarx ldarx
			ws = append(ws, 31<<26|5<<21|ra<<16|6<<11|xo<<1)
		}
	}
	return ws
}

// TestExtendedMnemonicsAgainstObjdump assembles every word of mnemonicWords with the cross
// assembler and checks that Decode spells each exactly as objdump does, in both byte orders.
func TestExtendedMnemonicsAgainstObjdump(t *testing.T) {
	words := mnemonicWords()
	var src strings.Builder
	src.WriteString("\t.text\n")
	for _, w := range words {
		fmt.Fprintf(&src, "\t.long %#x\n", w)
	}
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			obj := a.assemble(t, t.TempDir(), "words", src.String())
			want := a.objdumpText(t, obj)
			order := binary.ByteOrder(binary.BigEndian)
			if a.name == "le" {
				order = binary.LittleEndian
			}
			code := make([]byte, 4*len(words))
			for i, w := range words {
				order.PutUint32(code[4*i:], w)
			}
			var bad []string
			for i := range words {
				addr := uint64(4 * i)
				in, err := Decode(code[4*i:], addr, order)
				if err != nil {
					t.Fatal(err)
				}
				if in.Text != want[addr] {
					bad = append(bad, fmt.Sprintf("%#08x: got %q, objdump %q", words[i], in.Text, want[addr]))
				}
			}
			sort.Strings(bad)
			for i, b := range bad {
				if i == 40 {
					t.Errorf("... and %d more", len(bad)-40)
					break
				}
				t.Error(b)
			}
			t.Logf("%d words, %d agree with objdump", len(words), len(words)-len(bad))
		})
	}
}
