package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/adapter"
)

// BenchmarkStacksPids measures `hpcdap stacks --pids` on np plain processes of the cluster
// tests' hung.c (each blocked in a system call; address space randomisation on, as for any
// process started by hand), all reached by one agent: start to exit (attach, one sample, the
// merge, the detach).
func BenchmarkStacksPids(b *testing.B) {
	bin := buildHpcdap(b)
	needTools(b, "gcc")
	prog := filepath.Join(b.TempDir(), "hung")
	if out, err := exec.Command("gcc", "-g", "-O0", "-o", prog, "../../tests/cluster/testdata/hung.c").CombinedOutput(); err != nil {
		b.Fatalf("gcc hung.c: %v\n%s", err, out)
	}
	for _, np := range []int{256, 1024} {
		b.Run(fmt.Sprintf("np=%d", np), func(b *testing.B) {
			var list []string
			for r := range np {
				cmd := exec.Command(prog)
				cmd.Env = append(os.Environ(), fmt.Sprintf("SLURM_PROCID=%d", r))
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
				list = append(list, fmt.Sprintf("%d=%d", r, cmd.Process.Pid))
			}
			for _, p := range list {
				pid, _ := strconv.Atoi(p[strings.IndexByte(p, '=')+1:])
				waitFor(b, "a process to block", time.Minute, func() bool { return strings.HasPrefix(procField(pid, "State"), "S") })
			}
			for b.Loop() {
				out, errOut, code := stacksRun(b, bin, nil, "--pids", strings.Join(list, ","), "--format", "json")
				var body adapter.ParallelStacksBody
				if err := json.Unmarshal([]byte(out), &body); code != 0 || err != nil || body.Total != np {
					b.Fatalf("hpcdap stacks: status %d, %v, %d ranks\n%s", code, err, body.Total, errOut)
				}
			}
		})
	}
}
