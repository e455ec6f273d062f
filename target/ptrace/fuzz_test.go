//go:build linux && amd64

package ptrace

import (
	"encoding/binary"
	"testing"

	"github.com/hpcdap/hpcdap/target"
)

// FuzzParseSiginfo: siginfo decoding never panics and reads the fixed fields where the kernel
// puts them. Seeds include the siginfo of a real breakpoint stop.
func FuzzParseSiginfo(f *testing.F) {
	if buildErr == nil {
		tr, err := NewTracer()
		if err == nil {
			p, err := tr.Spawn([]string{progPath, "count", "1"}, nil, "", nil)
			if err == nil {
				pid := p.Info().Pid
				addr := symAddr(f, pid, progPath, "target_fn")
				p.WriteMemory(addr, []byte{0xcc})
				p.Resume(pid, 0)
				if ev := <-p.Events(); ev.Trap == target.TrapBreakpoint {
					tr.call(func() error {
						if raw, err := rawSiginfo(pid); err == nil {
							f.Add(raw[:])
						}
						return nil
					})
				}
				p.Kill(0, 9)
			}
			tr.Close()
		}
	}
	var kill [siginfoSize]byte
	binary.LittleEndian.PutUint32(kill[0:], 10)
	binary.LittleEndian.PutUint32(kill[8:], uint32(0xfffffffa)) // SI_TKILL
	binary.LittleEndian.PutUint32(kill[16:], 1234)
	f.Add(kill[:])
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, b []byte) {
		si, err := parseSiginfo(b)
		if err != nil {
			if len(b) >= 24 {
				t.Fatalf("rejected %d bytes", len(b))
			}
			return
		}
		if si.Signo != int(int32(binary.LittleEndian.Uint32(b))) {
			t.Fatal("signo")
		}
		if si.Code <= 0 && si.Addr != 0 || si.Code > 0 && si.Pid != 0 {
			t.Fatalf("both pid and addr set: %+v", si)
		}
	})
}
