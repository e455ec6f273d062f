package adapter

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
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
	p := compileMPI(b, "mpicc.openmpi")
	line := p.line(b, "after_init")
	for _, np := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			var plain, dap time.Duration
			for range b.N {
				plain += plainMPIRun(b, p, np)
				dap += dapToBreakpoint(b, p, np, line)
			}
			n := float64(b.N)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(plain.Seconds()/n, "mpirun-s")
			b.ReportMetric(dap.Seconds()/n, "hpcdap-s")
			b.ReportMetric(dap.Seconds()/plain.Seconds(), "hpcdap/mpirun")
		})
	}
}

// ompiEnvList is ompiEnv as "K=V" strings.
func ompiEnvList() []string {
	var env []string
	for k, v := range ompiEnv {
		env = append(env, k+"="+v.(string))
	}
	return env
}

// plainMPIRun times `mpirun.openmpi -np N program` to its end.
func plainMPIRun(b *testing.B, p *program, np int) time.Duration {
	cmd := exec.Command("mpirun.openmpi", "-np", strconv.Itoa(np), p.bin, "-")
	cmd.Env = append(os.Environ(), ompiEnvList()...)
	t0 := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("mpirun: %v\n%s", err, out)
	}
	return time.Since(t0)
}

// dapToBreakpoint times a DAP launch through mpirun until every rank has stopped at the line.
func dapToBreakpoint(b *testing.B, p *program, np, line int) time.Duration {
	d := newDAP(b, viaPipe)
	defer d.close()
	t0 := time.Now()
	d.launch(map[string]any{"program": p.bin, "launcher": "mpirun.openmpi", "np": np, "args": []string{"-"},
		"env": ompiEnv, "stopMode": "rank"})
	d.setBreakpoints(p.src, line)
	d.call("configurationDone", nil, nil)
	waitBreakpointStops(b, d, np)
	return time.Since(t0)
}
