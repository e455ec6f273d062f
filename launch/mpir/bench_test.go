package mpir

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

// BenchmarkOpenMPILaunchToTable measures MPIR launch mode through a real agent: from the agent
// spawning mpirun -np 4 to the table read at MPIR_Breakpoint (reported as ms-to-table), then
// the whole job to the launcher's exit.
func BenchmarkOpenMPILaunchToTable(b *testing.B) {
	need(b, ompiProg, agentBin)
	mpirun := testenv.NeedTool(b, "mpirun.openmpi", "openmpi-bin")
	var toTable time.Duration
	for b.Loop() {
		t0 := time.Now()
		a := startAgent(b, ompiEnv(), mpirun, "-np", "4", ompiProg)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		s, err := Launch(ctx, a.client, Options{})
		if err != nil {
			b.Fatal(err)
		}
		procs, err := s.WaitSpawned(ctx)
		if err != nil || len(procs) != 4 {
			b.Fatalf("%d procs, %v", len(procs), err)
		}
		toTable += time.Since(t0)
		s.Release(ctx)
		s.Wait(ctx)
		cancel()
	}
	b.ReportMetric(float64(toTable.Milliseconds())/float64(b.N), "ms-to-table")
}

// BenchmarkReadTable decodes a 1024-entry table from memory.
func BenchmarkReadTable(b *testing.B) {
	var procs []Proc
	for i := range 1024 {
		procs = append(procs, Proc{Rank: i, Host: "node" + strconv.Itoa(i/64), Executable: "/scratch/app", Pid: 4000 + i})
	}
	mem := blobMem{blobBase, tableImage(procs)}
	for b.Loop() {
		if _, err := ReadTable(context.Background(), mem, lp64, blobBase, blobBase+8); err != nil {
			b.Fatal(err)
		}
	}
}
