package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/ppc64"
)

// rspBenchHits is how many breakpoint hits one iteration of the hit benchmarks counts.
const rspBenchHits = 10000

// BenchmarkRSPBreakpointHit measures breakpoint hit-and-continue of a Power program under QEMU
// through the agent: a tool's trap word on add, and for each hit the Notify and the tool's
// ContinueProcess over CDTI, the agent stepping the thread over the trap through the stub. One
// iteration is a whole run of 10,000 hits (launch excluded).
func BenchmarkRSPBreakpointHit(b *testing.B) {
	for _, a := range powerArches {
		b.Run(a.name, func(b *testing.B) {
			emu := a.qemu10(b)
			exe := a.compile(b)
			addr := funcEntry(b, exe, "add")
			var total time.Duration
			for i := 0; i < b.N; i++ {
				h := newRSPHarness(b, emu)
				h.spawnPower(exe, strconv.Itoa(rspBenchHits))
				tt, _ := startStopped(b, h, 1)
				tt.mustUpdate(0, &cdti.SetBreakpoint{Addr: addr, Instruction: ppc64.TrapWordCNK})
				start := time.Now()
				tt.cont(0)
				hits := 0
				for {
					n := tt.notify()
					if n.Kind == cdti.NotifyTypeTermination {
						break
					}
					hits++
					tt.cont(0)
				}
				total += time.Since(start)
				if hits != rspBenchHits {
					b.Fatalf("%d hits", hits)
				}
				h.a.Shutdown(true)
			}
			b.ReportMetric(float64(b.N*rspBenchHits)/total.Seconds(), "hits/s")
			b.ReportMetric(float64(total.Microseconds())/float64(b.N*rspBenchHits), "µs/hit")
		})
	}
}

// BenchmarkRSPGDBBreakpointHit is the same program, emulator and breakpoint address under
// gdb-multiarch (`break *ADDR` with `commands / silent / continue / end`; gdb plants stub
// breakpoints, Z0). One iteration is a whole gdb session of 10,000 hits, gdb's start-up
// included.
func BenchmarkRSPGDBBreakpointHit(b *testing.B) {
	for _, a := range powerArches {
		b.Run(a.name, func(b *testing.B) {
			emu := a.qemu10(b)
			gdb, err := exec.LookPath("gdb-multiarch")
			if err != nil {
				b.Fatal("gdb-multiarch not found: install the Debian package gdb-multiarch")
			}
			exe := a.compile(b)
			addr := funcEntry(b, exe, "add")
			script := filepath.Join(b.TempDir(), "cmds.gdb")
			var total time.Duration
			for i := 0; i < b.N; i++ {
				emuCmd := exec.Command(emu, exe, strconv.Itoa(rspBenchHits))
				sock := testenv.StartQEMUStub(b, emuCmd)
				body := fmt.Sprintf("set confirm off\nset pagination off\ntarget remote %s\n"+
					"break *%#x\ncommands\nsilent\ncontinue\nend\ncontinue\n", sock, addr)
				if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				out, err := exec.Command(gdb, "-nx", "-batch", exe, "-x", script).CombinedOutput()
				total += time.Since(start)
				_ = emuCmd.Wait()
				if err != nil || !strings.Contains(string(out), "exited normally") {
					b.Fatalf("gdb: %v\n%s", err, out)
				}
			}
			b.ReportMetric(float64(b.N*rspBenchHits)/total.Seconds(), "hits/s")
			b.ReportMetric(float64(total.Microseconds())/float64(b.N*rspBenchHits), "µs/hit")
		})
	}
}

// BenchmarkRSPGetMemory measures GetMemory through the agent on a stopped Power program: one
// CDTI round trip, answered with m requests to the stub (8 bytes: one; 4 KiB: two, within
// QEMU's PacketSize).
func BenchmarkRSPGetMemory(b *testing.B) {
	a := powerArches[0]
	emu := a.qemu10(b)
	exe := a.compile(b)
	h := newRSPHarness(b, emu)
	h.spawnPower(exe)
	tt, _ := startStopped(b, h, 1)
	addr := funcEntry(b, exe, "main")
	for _, size := range []uint32{8, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				r := tt.query(0, &cdti.GetMemory{Addr: addr, Length: size})
				if r.Code != cdti.CmdSuccess {
					b.Fatal(r.Code)
				}
			}
		})
	}
}
