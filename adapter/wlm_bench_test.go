package adapter

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkMPIRunToBreakpoint: launch → every rank stopped at a breakpoint after MPI_Init,
// through `mpirun.openmpi -np N` (MPIR, one agent), for 1, 4, 16 and 64 ranks; beside the
// plain `mpirun -np N` run time of the same program (the overhead ratio).
//
//	go test -run '^$' -bench MPIRunToBreakpoint -benchtime 1x ./adapter
func BenchmarkMPIRunToBreakpoint(b *testing.B) {
	needTool(b, "mpirun.openmpi")
	benchLauncherToBreakpoint(b, compileMPI(b, "mpicc.openmpi"), "mpirun.openmpi", "-np", ompiEnv)
}

// BenchmarkHydraToBreakpoint: the same through `mpiexec.hydra -n N` (fork/exec following,
// the following agent serving every rank).
//
//	go test -run '^$' -bench HydraToBreakpoint -benchtime 1x ./adapter
func BenchmarkHydraToBreakpoint(b *testing.B) {
	needTool(b, "mpiexec.hydra")
	benchLauncherToBreakpoint(b, compileMPI(b, "mpicc.mpich"), "mpiexec.hydra", "-n", nil)
}

// benchLauncherToBreakpoint times, for 1, 4, 16 and 64 ranks, a plain run of the program
// under launcher and a DAP launch through it to every rank at the after_init breakpoint.
func benchLauncherToBreakpoint(b *testing.B, p *program, launcher, npFlag string, env map[string]any) {
	line := p.line(b, "after_init")
	for _, np := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			var plain, dap time.Duration
			for range b.N {
				plain += plainLauncherRun(b, p, launcher, npFlag, np, env)
				dap += dapToBreakpoint(b, p, launcher, np, line, env)
			}
			n := float64(b.N)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(plain.Seconds()/n, "plain-s")
			b.ReportMetric(dap.Seconds()/n, "hpcdap-s")
			b.ReportMetric(dap.Seconds()/plain.Seconds(), "hpcdap/plain")
		})
	}
}

// envList is a launch.json env object as "K=V" strings.
func envList(env map[string]any) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v.(string))
	}
	return out
}

// plainLauncherRun times `launcher npFlag N program -` to its end.
func plainLauncherRun(b *testing.B, p *program, launcher, npFlag string, np int, env map[string]any) time.Duration {
	cmd := exec.Command(launcher, npFlag, strconv.Itoa(np), p.bin, "-")
	cmd.Env = append(os.Environ(), envList(env)...)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(t0)
	// The ranks exit with 10 + rank: a launcher may pass that on as its own exit status.
	if _, exited := err.(*exec.ExitError); err != nil && !exited || strings.Count(string(out), ": sum ") != np {
		b.Fatalf("%s: %v\n%s", launcher, err, out)
	}
	return d
}

// dapToBreakpoint times a DAP launch through launcher until every rank has stopped at the line.
func dapToBreakpoint(b *testing.B, p *program, launcher string, np, line int, env map[string]any) time.Duration {
	d := newDAP(b, viaPipe)
	defer d.close()
	t0 := time.Now()
	args := map[string]any{"program": p.bin, "launcher": launcher, "np": np, "args": []string{"-"}, "stopMode": "rank"}
	if env != nil {
		args["env"] = env
	}
	d.launch(args)
	d.setBreakpoints(p.src, line)
	d.call("configurationDone", nil, nil)
	waitBreakpointStops(b, d, np)
	return time.Since(t0)
}

// BenchmarkTerminateStoppedJob: the disconnect with terminateDebuggee of a 2-rank job stopped
// at a breakpoint, request to response (the ranks and the launcher ended).
//
//	go test -run '^$' -bench TerminateStoppedJob -benchtime 3x ./adapter
func BenchmarkTerminateStoppedJob(b *testing.B) {
	for _, c := range []struct{ launcher, mpicc string }{{"mpirun.openmpi", "mpicc.openmpi"}, {"mpiexec.hydra", "mpicc.mpich"}} {
		b.Run(c.launcher, func(b *testing.B) {
			needTool(b, c.launcher)
			p := compileMPI(b, c.mpicc)
			var total time.Duration
			for range b.N {
				b.StopTimer()
				d, _ := stoppedJobToTerminate(b, p, c.launcher)
				t0 := time.Now()
				d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
				total += time.Since(t0)
				d.end()
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(total.Seconds()/float64(b.N), "s/terminate")
		})
	}
}
