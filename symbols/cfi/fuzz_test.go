package cfi

import (
	"debug/elf"
	"encoding/binary"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the .eh_frame and .debug_frame decoders and evaluates the
// rules of every FDE found; it must never panic. Seeds are slices of real sections.
func FuzzParse(f *testing.F) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/bin/sh"} {
		ef, err := elf.Open(path)
		if err != nil {
			continue
		}
		if s := ef.Section(".eh_frame"); s != nil {
			if data, err := s.Data(); err == nil {
				for _, n := range []int{160, 1024, 4096} {
					if len(data) > n {
						f.Add(data[:n], true, false)
						f.Add(data[:n], false, true)
					}
				}
			}
		}
		ef.Close()
	}
	f.Fuzz(func(t *testing.T, data []byte, eh, big bool) {
		var order binary.ByteOrder = binary.LittleEndian
		if big {
			order = binary.BigEndian
		}
		tab := NewTable()
		_ = tab.Parse(data, Options{EH: eh, Addr: 0x1000, Order: order, PtrSize: 8})
		tab.Sort()
		for _, fde := range tab.FDEs() {
			for _, pc := range []uint64{fde.Begin, fde.Begin + (fde.End-fde.Begin)/2, fde.End - 1} {
				_, _ = fde.RowAt(pc)
				_ = tab.Lookup(pc)
			}
		}
	})
}
