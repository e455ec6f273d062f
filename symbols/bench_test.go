package symbols

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The benchmarks use a generated program: benchFiles compile units with benchFuncs
// functions and benchTypes struct types each.
const (
	benchFiles = 40
	benchFuncs = 150 // per file: 6,000 functions
	benchTypes = 60  // per file: 2,400 struct types
)

var (
	benchOnce sync.Once
	benchExe  string
	benchErr  error
)

// bigProgram generates and compiles the benchmark program once per run.
func bigProgram(b *testing.B) string {
	b.Helper()
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "symbols-bench-")
		if err != nil {
			benchErr = err
			return
		}
		var srcs []string
		for f := 0; f < benchFiles; f++ {
			var sb strings.Builder
			fmt.Fprintf(&sb, "#include <stddef.h>\nextern volatile long sink;\n")
			for t := 0; t < benchTypes; t++ {
				fmt.Fprintf(&sb, "struct s%d_%d { int a; double b[%d]; struct s%d_%d *next; char name[16]; };\n",
					f, t, t%7+1, f, t)
			}
			for i := 0; i < benchFuncs; i++ {
				t := i % benchTypes
				fmt.Fprintf(&sb, "long f%d_%d(struct s%d_%d *p, int n)\n{\n\tlong acc = 0;\n", f, i, f, t)
				fmt.Fprintf(&sb, "\tfor (int k = 0; k < n; k++) {\n\t\tacc += p->a * k;\n\t\tp = p->next;\n\t}\n")
				fmt.Fprintf(&sb, "\tsink = acc;\n\treturn acc + %d;\n}\n", i)
			}
			if f == 0 {
				fmt.Fprintf(&sb, "volatile long sink;\nint main(void) { return 0; }\n")
			}
			p := filepath.Join(dir, fmt.Sprintf("gen%d.c", f))
			if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
				benchErr = err
				return
			}
			srcs = append(srcs, p)
		}
		benchExe = filepath.Join(dir, "big")
		args := append([]string{"-g", "-O0", "-o", benchExe}, srcs...)
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			benchErr = fmt.Errorf("gcc: %v\n%s", err, out)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchExe
}

// BenchmarkLoad measures opening and indexing the generated program (no cache); heap-MB is
// the live heap the Binary keeps.
func BenchmarkLoad(b *testing.B) {
	exe := bigProgram(b)
	b.ReportAllocs()
	var st LoadStats
	var heap uint64
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		bin, err := Open(exe, nil)
		if err != nil {
			b.Fatal(err)
		}
		// Force the line tables too, as a first breakpoint would.
		for _, f := range bin.SourceFiles() {
			for _, cu := range bin.files[f] {
				cu.lineTable()
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		st = bin.Stats()
		runtime.KeepAlive(bin)
		bin.Close()
	}
	b.ReportMetric(float64(heap)/(1<<20), "heap-MB")
	b.ReportMetric(float64(st.Functions), "functions")
	b.ReportMetric(float64(st.DIEs), "DIEs")
}

// BenchmarkGDBLoad runs gdb in batch mode on the same program, asking it for one line (which
// makes it read and index the symbols), for comparison with BenchmarkLoad; maxrss-MB is gdb's
// peak memory.
func BenchmarkGDBLoad(b *testing.B) {
	exe := bigProgram(b)
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		b.Fatal("required tool gdb not found in PATH")
	}
	var rss int64
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(gdb, "-batch", "-nx", "-ex", "info line f39_149", exe)
		cmd.Env = append(os.Environ(), "DEBUGINFOD_URLS=")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Line") {
			b.Fatalf("gdb: %v\n%s", err, out)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			rss = ru.Maxrss
		}
	}
	b.ReportMetric(float64(rss)/1024, "maxrss-MB")
}

// BenchmarkPCToLine measures pc-to-line lookups at random function addresses.
func BenchmarkPCToLine(b *testing.B) {
	bin, err := Open(bigProgram(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	fs := bin.Functions()
	r := rand.New(rand.NewSource(1))
	pcs := make([]uint64, 4096)
	for i := range pcs {
		f := fs[r.Intn(len(fs))]
		pcs[i] = f.Low + uint64(r.Int63n(int64(f.High-f.Low)))
	}
	for _, pc := range pcs {
		bin.LineForPC(pc) // decode the line tables before timing
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := bin.LineForPC(pcs[i%len(pcs)]); !ok {
			b.Fatalf("no line for %#x", pcs[i%len(pcs)])
		}
	}
}

// BenchmarkLineToPC measures breakpoint placement for random file:line pairs.
func BenchmarkLineToPC(b *testing.B) {
	bin, err := Open(bigProgram(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	var files []string
	for _, f := range bin.SourceFiles() {
		if strings.Contains(f, "gen") {
			files = append(files, f)
		}
	}
	r := rand.New(rand.NewSource(1))
	type q struct {
		file string
		line int
	}
	qs := make([]q, 1024)
	for i := range qs {
		qs[i] = q{files[r.Intn(len(files))], 70 + r.Intn(benchFuncs*8)}
	}
	for _, x := range qs {
		bin.LineBreakpoints(x.file, x.line)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x := qs[i%len(qs)]
		if _, err := bin.LineBreakpoints(x.file, x.line); err != nil {
			b.Fatal(err)
		}
	}
}

const libcPath = "/lib/x86_64-linux-gnu/libc.so.6"

// BenchmarkLoadLibc measures opening the C library with its separate debug file (Debian's
// libc6-dbg), a large real-world DWARF 5 object.
func BenchmarkLoadLibc(b *testing.B) {
	b.ReportAllocs()
	var heap uint64
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		bin, err := Open(libcPath, nil)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		if bin.DebugPath == "" {
			b.Log("no separate debug file found for libc (install libc6-dbg)")
		}
		runtime.KeepAlive(bin)
		bin.Close()
	}
	b.ReportMetric(float64(heap)/(1<<20), "heap-MB")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// BenchmarkGDBLoadLibc is gdb's side of BenchmarkLoadLibc.
func BenchmarkGDBLoadLibc(b *testing.B) {
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		b.Fatal("required tool gdb not found in PATH")
	}
	var rss int64
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(gdb, "-batch", "-nx", "-ex", "info line raise", libcPath)
		cmd.Env = append(os.Environ(), "DEBUGINFOD_URLS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("gdb: %v\n%s", err, out)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			rss = ru.Maxrss
		}
	}
	b.ReportMetric(float64(rss)/1024, "maxrss-MB")
}

// BenchmarkLoadLibcIndexCache is BenchmarkLoadLibc with the persistent index cache: "cold"
// builds the index and writes the entry (a first session), "warm" reads it (every later one).
func BenchmarkLoadLibcIndexCache(b *testing.B) {
	for _, warm := range []bool{false, true} {
		name := "cold"
		if warm {
			name = "warm"
		}
		b.Run(name, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "cache")
			if warm {
				if _, err := Open(libcPath, &Options{IndexCacheDir: dir}); err != nil {
					b.Fatal(err)
				}
			}
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				if !warm {
					os.RemoveAll(dir)
				}
				bin, err := Open(libcPath, &Options{IndexCacheDir: dir})
				if err != nil {
					b.Fatal(err)
				}
				if bin.Stats().IndexCached != warm {
					b.Fatalf("index cached: %v", bin.Stats().IndexCached)
				}
				bin.Close()
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used: on a loaded machine it
// tells more than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
