package rsp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// benchSource calls add() as often as its argument says.
const benchSource = `#include <stdlib.h>
int total;
__attribute__((noinline)) int add(int a, int b) { return a + b; }
int main(int argc, char **argv) {
	long n = atol(argv[1]);
	for (long i = 0; i < n; i++) total = add(total, (int)i);
	return 0;
}
`

// benchHits is how many breakpoint hits one benchmark iteration counts.
const benchHits = 10000

// BenchmarkBreakpointHit measures breakpoint hit-and-continue through this client: at each hit
// of a trap word at add's entry, restore the word, step, plant it again, continue (the agent's
// cycle). One iteration is a whole run of 10,000 hits, launch included.
func BenchmarkBreakpointHit(b *testing.B) {
	for _, a := range []crossArch{archBE, archLE} {
		b.Run(a.name, func(b *testing.B) {
			emu, _ := a.qemu(b)
			exe := a.compile(b, "bench", benchSource, "-O0")
			addr := resolve(b, exe, "add")
			var hitTime time.Duration
			for i := 0; i < b.N; i++ {
				p := launch(b, emu, []string{exe, fmt.Sprint(benchHits)}, Options{})
				start := time.Now()
				if hits := breakLoop(b, p, addr, 0); hits != benchHits {
					b.Fatalf("%d hits", hits)
				}
				hitTime += time.Since(start)
				p.Close()
			}
			b.ReportMetric(float64(b.N*benchHits)/hitTime.Seconds(), "hits/s")
			b.ReportMetric(float64(hitTime.Microseconds())/float64(b.N*benchHits), "µs/hit")
		})
	}
}

// BenchmarkGDBBreakpointHit does the same with gdb-multiarch as the client: `break add` with
// `commands / silent / continue / end`, run to the end. gdb plants stub breakpoints (Z0). One
// iteration is a whole gdb session with 10,000 hits, gdb's start-up included.
func BenchmarkGDBBreakpointHit(b *testing.B) {
	for _, a := range []crossArch{archBE, archLE} {
		b.Run(a.name, func(b *testing.B) {
			emu, _ := a.qemu(b)
			gdb := testenv.NeedTool(b, "gdb-multiarch", "gdb-multiarch")
			exe := a.compile(b, "bench", benchSource, "-O0")
			addr := resolve(b, exe, "add")
			endian := map[bool]string{true: "big", false: "little"}[a == archBE]
			script := filepath.Join(b.TempDir(), "cmds.gdb")
			body := fmt.Sprintf("set architecture powerpc:common64\nset endian %s\nset confirm off\nset pagination off\n"+
				"target remote %%s\nbreak *%#x\ncommands\nsilent\ncontinue\nend\ncontinue\n", endian, addr)
			var total time.Duration
			for i := 0; i < b.N; i++ {
				emuCmd := exec.Command(emu, exe, fmt.Sprint(benchHits))
				sock := testenv.StartQEMUStub(b, emuCmd)
				if err := os.WriteFile(script, []byte(fmt.Sprintf(body, sock)), 0o644); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				out, err := exec.Command(gdb, "-nx", "-batch", "-x", script).CombinedOutput()
				total += time.Since(start)
				_ = emuCmd.Wait()
				if err != nil || !strings.Contains(string(out), "exited normally") {
					b.Fatalf("gdb: %v\n%s", err, out)
				}
			}
			b.ReportMetric(float64(b.N*benchHits)/total.Seconds(), "hits/s")
			b.ReportMetric(float64(total.Microseconds())/float64(b.N*benchHits), "µs/hit")
		})
	}
}

// BenchmarkReadMemory measures one memory read round trip (8 bytes, and 4 KiB, which takes two
// m requests under QEMU's PacketSize of 0x1000).
func BenchmarkReadMemory(b *testing.B) {
	a := archBE
	emu, _ := a.qemu(b)
	exe := a.compile(b, "bench", benchSource, "-O0")
	p := launch(b, emu, []string{exe, "1"}, Options{})
	addr := resolve(b, exe, "main")
	for _, size := range []int{8, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				if _, err := p.ReadMemory(addr, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
