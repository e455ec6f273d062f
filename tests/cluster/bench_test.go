package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/launch"
)

// benchNP are the job sizes of the Slurm benchmarks (4 nodes of 4 CPUs: 16 fill the cluster).
var benchNP = []int{8, 16}

// runningJob starts `srun --mpi=pmix -N4 -n np ranks 600` outside the debugger and waits until
// its np tasks run; it returns the step id. The job is cancelled when the benchmark ends.
func runningJob(b *testing.B, c *Cluster, prog string, np int) string {
	b.Helper()
	cmd := c.Command("srun", "--mpi=pmix", "-N4", "-n"+strconv.Itoa(np), prog, "600")
	cmd.Dir = b.TempDir()
	cmd.Env = append(cmd.Env, ompiTaskEnv)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Command("scancel", "--quiet", "--user=root").Run()
		cmd.Wait()
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := c.Command("squeue", "-h", "-s", "-o", "%i").Output()
		for _, step := range strings.Fields(string(out)) {
			if !strings.HasSuffix(step, ".0") {
				continue
			}
			n := 0
			for _, node := range c.Nodes {
				pids, _ := c.Command("scontrol", "listpids", step, node).Output()
				for _, l := range strings.Split(string(pids), "\n") {
					// PID JOBID STEPID LOCALID GLOBALID; running tasks have a pid and a
					// global id.
					if f := strings.Fields(l); len(f) == 5 {
						pid, err := strconv.Atoi(f[0])
						if _, err2 := strconv.Atoi(f[4]); err == nil && err2 == nil && pid > 0 {
							n++
						}
					}
				}
			}
			if n >= np {
				return step
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("srun -n%d: tasks not running within 60 s", np)
	return ""
}

// Attach to a running np-rank job by its step id through `hpcdap dap`: from the attach
// request to the initialized event (every rank under control, the table known), then a
// disconnect that leaves the job running.
//
//	go test ./tests/cluster -run '^$' -bench SlurmAttachDAP -benchtime 5x
func BenchmarkSlurmAttachDAP(b *testing.B) {
	p := buildC(b, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(b)
	for _, np := range benchNP {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			step := runningJob(b, c, p.bin, np)
			for b.Loop() {
				d := startDAP(b, c, 120*time.Second)
				d.initialize()
				d.in("attach")
				d.call("attach", map[string]any{"slurmJob": step}, nil)
				d.event("initialized", 60*time.Second)
				if n := len(d.rankTable()); n != np {
					b.Fatalf("%d ranks, want %d", n, np)
				}
				b.StopTimer()
				d.call("configurationDone", nil, nil)
				d.call("disconnect", map[string]any{"terminateDebuggee": false}, nil)
				d.ranks = nil // the job's ranks are not the session's to kill
				d.close()
				b.StartTimer()
			}
		})
	}
}

// The job layer alone: registering a running np-rank step and starting its node agents (until
// every agent has registered), then letting it go.
//
//	go test ./tests/cluster -run '^$' -bench SlurmAttachLaunch -benchtime 5x
func BenchmarkSlurmAttachLaunch(b *testing.B) {
	p := buildC(b, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(b)
	b.Setenv("SLURM_CONF", c.Conf)
	for _, np := range benchNP {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			step := runningJob(b, c, p.bin, np)
			fe, err := launch.NewFrontend(launch.Options{WLM: "slurm", AgentPath: hpcdap(b), NodeTmpDir: c.LocalDir(),
				AdvertiseHost: "127.0.0.1", WorkDir: b.TempDir(), Timeout: 60 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer fe.Close()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				app, g, err := launch.Start(ctx, fe, launch.Request{SlurmJob: step})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				if len(g.Endpoints) != 4 || app.Placement().Size != np {
					b.Fatalf("%d agents, %d ranks", len(g.Endpoints), app.Placement().Size)
				}
				b.StopTimer()
				g.Stop()
				app.Deregister()
				b.StartTimer()
			}
		})
	}
}

// Launch through `hpcdap dap` to every rank stopped at a breakpoint after MPI_Init (srun under
// MPIR, agents through srun --overlap, the ranks continued to the breakpoint); compare with
// BenchmarkSrunPlain, the same job run to completion without a debugger.
//
//	go test ./tests/cluster -run '^$' -bench 'SrunLaunchToBreakpoint|SrunPlain' -benchtime 5x
func BenchmarkSrunLaunchToBreakpoint(b *testing.B) {
	p := buildC(b, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(b)
	line := p.line(b, "bp")
	for _, np := range benchNP {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				if _, err := c.WaitIdle(ctx); err != nil {
					b.Fatal(err)
				}
				cancel()
				d := startDAP(b, c, 180*time.Second)
				d.initialize()
				d.in("launch")
				b.StartTimer()
				d.call("launch", map[string]any{"program": p.bin, "cwd": b.TempDir(), "launcher": "srun",
					"launcherArgs": []string{"--mpi=pmix", "-N4"}, "np": np, "stopMode": "rank",
					"env": map[string]string{"OMPI_MCA_mpi_yield_when_idle": "1"}}, nil)
				d.event("initialized", 120*time.Second)
				d.call("setBreakpoints", map[string]any{"source": map[string]any{"path": p.src},
					"breakpoints": []map[string]any{{"line": line}}}, nil)
				d.call("configurationDone", nil, nil)
				d.in("run to the breakpoint")
				for {
					stopped := 0
					for _, r := range d.rankTable() {
						switch {
						case r.State == "stopped" && r.StopReason == "breakpoint":
							stopped++
						case r.State == "stopped" || r.State == "exited":
							d.fatalf("rank %d on %s: %+v before the breakpoint", r.Rank, r.Host, r)
						}
					}
					if stopped == np {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				b.StopTimer()
				d.call("disconnect", map[string]any{"terminateDebuggee": true}, nil)
				d.close()
				b.StartTimer()
			}
		})
	}
}

// The same job as BenchmarkSrunLaunchToBreakpoint, run to completion by srun alone.
func BenchmarkSrunPlain(b *testing.B) {
	p := buildC(b, "ranks", "mpicc.openmpi", "libopenmpi-dev")
	c := slurm.Need(b)
	for _, np := range benchNP {
		b.Run(fmt.Sprintf("np%d", np), func(b *testing.B) {
			dir := b.TempDir()
			for b.Loop() {
				b.StopTimer()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				if _, err := c.WaitIdle(ctx); err != nil {
					b.Fatal(err)
				}
				cancel()
				cmd := c.Command("srun", "--mpi=pmix", "-N4", "-n"+strconv.Itoa(np), p.bin)
				cmd.Dir = dir
				cmd.Env = append(cmd.Env, ompiTaskEnv)
				out, err := os.Create(filepath.Join(dir, "out"))
				if err != nil {
					b.Fatal(err)
				}
				cmd.Stdout, cmd.Stderr = out, out
				b.StartTimer()
				cmd.Run() // the ranks exit with 10+rank: srun fails by design
				b.StopTimer()
				out.Close()
				text, _ := os.ReadFile(out.Name())
				if n := strings.Count(string(text), fmt.Sprintf("/%d on node", np)); n != np {
					b.Fatalf("%d of %d ranks ran:\n%s", n, np, text)
				}
				b.StartTimer()
			}
		})
	}
}
