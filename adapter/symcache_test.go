package adapter

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/symbols"
)

// cacheSession runs one session of a server of its own (its own in-memory symbol cache, as a
// new hpcdap process has) with the persistent index cache in dir, to the first stop at line
// of p, reads the stop's stack, and returns the server's index counts and the time from the
// launch request to the stop.
func cacheSession(t testing.TB, p *program, line int, dir string) (built, cached int, took time.Duration) {
	return cacheLaunch(t, p, line, dir, map[string]any{"program": p.bin})
}

// cacheLaunch is cacheSession with the launch arguments given; it waits for every rank ("np")
// to stop at the line.
func cacheLaunch(t testing.TB, p *program, line int, dir string, args map[string]any) (built, cached int, took time.Duration) {
	return cacheLaunchConfiguring(t, p, line, dir, args, 0)
}

// cacheLaunchConfiguring is cacheLaunch for a client that takes configure between the
// launch's initialized event and its configurationDone (as an editor does, sending its
// breakpoints file by file).
func cacheLaunchConfiguring(t testing.TB, p *program, line int, dir string, args map[string]any, configure time.Duration) (built, cached int, took time.Duration) {
	srv := NewServer(Config{AgentPath: hpcdapBinary(t), Log: testLogger(t), LogDir: t.TempDir(),
		SymbolOptions: &symbols.Options{IndexCacheDir: dir}})
	d := pipeSession(t, srv)
	defer d.close()
	d.initialize()
	t0 := time.Now()
	d.call("launch", args, nil)
	d.event("initialized")
	d.setBreakpoints(p.src, line)
	time.Sleep(configure)
	d.call("configurationDone", nil, nil)
	np := 1
	if n, ok := args["np"].(int); ok {
		np = n
	}
	tid := waitBreakpointStops(t, d, np)[0]
	took = time.Since(t0)
	var trace dap.StackTraceResponseBody
	d.call("stackTrace", map[string]any{"threadId": tid}, &trace)
	if len(trace.StackFrames) == 0 || trace.StackFrames[0].Line != line {
		t.Fatalf("stopped at %+v, want line %d", trace.StackFrames, line)
	}
	built, cached = srv.symbolCache().IndexStats()
	return built, cached, took
}

// TestSymbolIndexCacheAcrossSessions: the first session builds the index of every binary it
// reads and stores it; a second session (a new process's worth of in-memory state) builds
// none and takes them all from the persistent cache, and stops at the same place.
func TestSymbolIndexCacheAcrossSessions(t *testing.T) {
	p := compileC(t, "stacks")
	line := p.line(t, "leaf-write")
	dir := filepath.Join(t.TempDir(), "symbols")
	built1, cached1, _ := cacheSession(t, p, line, dir)
	if built1 == 0 || cached1 != 0 {
		t.Fatalf("first session: %d indexes built, %d cached; want some built, none cached", built1, cached1)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != built1 {
		t.Fatalf("cache directory after the first session: %d entries (%v), want %d", len(ents), err, built1)
	}
	built2, cached2, _ := cacheSession(t, p, line, dir)
	t.Logf("first session: %d indexes built; second: %d built, %d from the cache", built1, built2, cached2)
	if built2 != 0 || cached2 != built1 {
		t.Fatalf("second session: %d indexes built, %d cached; want 0 built, %d cached", built2, cached2, built1)
	}
}

// BenchmarkLaunchToStopIndexCache: launch → first stop at np 1 through a new server (as a new
// `hpcdap dap` process), with the persistent index cache empty (cold: the first session), with
// it filled (warm: every later one), and without it, beside a plain run of the program; with
// the local launcher and through Open MPI's mpirun; through mpirun also at np 4, to every
// rank stopped at the breakpoint (stop mode rank).
//
//	go test ./adapter -run '^$' -bench LaunchToStopIndexCache -benchtime 5x
func BenchmarkLaunchToStopIndexCache(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		p := compileC(b, "stacks")
		benchIndexCache(b, p, p.line(b, "leaf-write"), map[string]any{"program": p.bin}, func(b *testing.B) {
			cmd := exec.Command(p.bin)
			cmd.Env = append(os.Environ(), "HPCDAP_RANK=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s: %v\n%s", p.bin, err, out)
			}
		})
	})
	b.Run("mpirun", func(b *testing.B) {
		needTool(b, "mpirun.openmpi")
		p := compileMPI(b, "mpicc.openmpi")
		args := map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": 1, "args": []string{"-"},
			"env": ompiEnv}
		benchIndexCache(b, p, p.line(b, "after_init"), args, func(b *testing.B) {
			plainLauncherRun(b, p, "mpirun.openmpi", "-np", 1, ompiEnv)
		})
	})
	b.Run("mpirun-np4", func(b *testing.B) {
		needTool(b, "mpirun.openmpi")
		p := compileMPI(b, "mpicc.openmpi")
		args := map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": 4, "args": []string{"-"},
			"env": ompiEnv, "stopMode": "rank"}
		benchIndexCache(b, p, p.line(b, "after_init"), args, func(b *testing.B) {
			plainLauncherRun(b, p, "mpirun.openmpi", "-np", 4, ompiEnv)
		})
	})
}

func benchIndexCache(b *testing.B, p *program, line int, args map[string]any, plain func(*testing.B)) {
	b.Run("plain", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			t0 := time.Now()
			plain(b)
			total += time.Since(t0)
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms")
	})
	// warm-configure100ms: warm, the client taking 100 ms to configure the session.
	for _, mode := range []string{"none", "cold", "warm", "warm-configure100ms"} {
		b.Run(mode, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "symbols")
			// b.Run calls this more than once: mode stays as it is.
			mode, configure := mode, time.Duration(0)
			if mode == "warm-configure100ms" {
				mode, configure = "warm", 100*time.Millisecond
			}
			if mode == "warm" {
				cacheLaunch(b, p, line, dir, args)
			}
			var total time.Duration
			cpu0 := cpuTime()
			for range b.N {
				switch mode {
				case "none":
					dir = ""
				case "cold":
					os.RemoveAll(dir)
				}
				built, cached, took := cacheLaunchConfiguring(b, p, line, dir, args, configure)
				if (mode == "warm") != (built == 0 && cached > 0) {
					b.Fatalf("%s: %d indexes built, %d cached", mode, built, cached)
				}
				total += took
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-stop")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "frontend-cpu-ms")
		})
	}
}

// cpuTime is the CPU time (user and system) this process, the front end, has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
