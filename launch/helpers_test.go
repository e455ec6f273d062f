package launch

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/launch/pmix"
	"github.com/hpcdap/hpcdap/tests/cluster"
)

// One Slurm cluster for the package, started by the first test that needs it.
var slurm = cluster.Lazy(cluster.Config{})

var testDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "launch-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = dir
	code := m.Run()
	if err := slurm.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// Test programs, built on first use.
var (
	buildMu   sync.Mutex
	built     = map[string]string{}
	buildErrs = map[string]error{}
)

// program builds one of the test programs and returns its path: "ompi" and "mpich"
// (testdata/mpi_ranks.c with mpicc.openmpi or mpicc.mpich), "serial" (testdata/serial.c with
// gcc) or "hpcdap" (the hpcdap binary).
func program(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if err, ok := buildErrs[name]; ok {
		t.Fatalf("building %s: %v", name, err)
	}
	out := filepath.Join(testDir, name)
	var err error
	switch name {
	case "ompi":
		err = testenv.Build("libopenmpi-dev", "mpicc.openmpi", "-g", "-O0", "-o", out, "testdata/mpi_ranks.c")
	case "mpich":
		err = testenv.Build("libmpich-dev", "mpicc.mpich", "-g", "-O0", "-o", out, "testdata/mpi_ranks.c")
	case "serial":
		err = testenv.Build("gcc", "gcc", "-g", "-O0", "-o", out, "testdata/serial.c")
	case "hpcdap":
		args := []string{"build", "-o", out}
		if pmix.Built {
			args = append(args, "-tags", "pmix") // the PMIx tool is this binary too
		}
		err = testenv.Build("golang", "go", append(args, "github.com/hpcdap/hpcdap/cmd/hpcdap")...)
	default:
		err = fmt.Errorf("unknown test program %q", name)
	}
	if err != nil {
		buildErrs[name] = err
		t.Fatalf("building %s: %v", name, err)
	}
	built[name] = out
	return out
}

// ompiEnv lets Open MPI's mpirun run as root on a 2-core machine, and keeps it from aborting
// the job when the first rank exits with a non-zero code (the test program's ranks exit with
// 10+rank, each of which must be seen).
var ompiEnv = []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
	"OMPI_MCA_rmaps_base_oversubscribe=1", "OMPI_MCA_orte_abort_on_non_zero_status=0"}

// hydraArgs keep mpiexec.hydra from killing the other ranks when one exits with a non-zero code.
var hydraArgs = []string{"-disable-auto-cleanup"}

// newFrontend makes a front end for a workload manager with the test's hpcdap binary.
func newFrontend(t testing.TB, wlm string, nodeTmp string) *Frontend {
	t.Helper()
	fe, err := NewFrontend(Options{WLM: wlm, AgentPath: program(t, "hpcdap"), NodeTmpDir: nodeTmp,
		Timeout: 60 * time.Second, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatalf("NewFrontend(%s): %v", wlm, err)
	}
	t.Cleanup(func() {
		if err := fe.Close(); err != nil {
			t.Errorf("Frontend.Close: %v", err)
		}
	})
	return fe
}

// tracerProcess is the process (thread group) whose thread traces pid, or 0.
func tracerProcess(pid int) int {
	tr, _ := testenv.ProcStatus(pid, "TracerPid")
	tid, err := strconv.Atoi(tr)
	if err != nil || tid == 0 {
		return 0
	}
	g, _ := testenv.ProcStatus(tid, "Tgid")
	tgid, _ := strconv.Atoi(g)
	return tgid
}

// ranksRunning finds the processes of this host that run prog, keyed by the rank an
// environment variable gives, keeping those whose filter variables match.
func ranksRunning(t testing.TB, prog, rankVar string, filter map[string]string) map[int]int {
	t.Helper()
	want, err := filepath.EvalSymlinks(prog)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err != nil || exe != want {
			continue
		}
		ok := true
		for k, v := range filter {
			if got, _ := testenv.ProcEnv(pid, k); got != v {
				ok = false
			}
		}
		if v, found := testenv.ProcEnv(pid, rankVar); ok && found {
			if r, err := strconv.Atoi(v); err == nil {
				out[r] = pid
			}
		}
	}
	return out
}

// rankTool is a test tool driving the ranks of a job through their node agents, as the
// adapter does.
type rankTool struct {
	t       testing.TB
	clients map[int]*cdti.Client // by rank
	conns   []*cdti.Client
}

// x86RDI is the offset of rdi in x86-64's user_regs_struct.
const x86RDI = 14 * 8

// dialAgents connects one CDTI client per agent.
func dialAgents(t testing.TB, g *Agents) *rankTool {
	t.Helper()
	rt := &rankTool{t: t, clients: map[int]*cdti.Client{}}
	for _, ep := range g.Endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := cdti.Dial(ctx, "tcp", ep.Addr, cdti.ClientOptions{ToolID: 3, Token: []byte(ep.Token), Timeout: 30 * time.Second})
		cancel()
		if err != nil {
			t.Fatalf("dial agent on %s at %s: %v", ep.Host, ep.Addr, err)
		}
		t.Cleanup(func() { c.Close() })
		rt.conns = append(rt.conns, c)
		for _, r := range ep.Ranks {
			rt.clients[r] = c
		}
	}
	return rt
}

func (rt *rankTool) update(rank int, cmds ...cdti.Command) error {
	rs, err := rt.clients[rank].Update(context.Background(), uint32(rank), cmds...)
	if err != nil {
		return err
	}
	for i, r := range rs {
		if r.Code != cdti.CmdSuccess {
			return fmt.Errorf("%v: %v", cmds[i].CommandType(), r.Code)
		}
	}
	return nil
}

// notification waits for the next notification of a rank on its connection, keeping the
// others for later.
type notes struct {
	mu      sync.Mutex
	pending map[*cdti.Client][]*cdti.Notify
}

var allNotes = &notes{pending: map[*cdti.Client][]*cdti.Notify{}}

func (rt *rankTool) next(rank int, limit time.Duration) (*cdti.Notify, error) {
	c := rt.clients[rank]
	deadline := time.After(limit)
	for {
		allNotes.mu.Lock()
		q := allNotes.pending[c]
		for i, n := range q {
			if int(n.Rank) == rank {
				allNotes.pending[c] = append(q[:i:i], q[i+1:]...)
				allNotes.mu.Unlock()
				return n, nil
			}
		}
		allNotes.mu.Unlock()
		select {
		case n, ok := <-c.Notifications():
			if !ok {
				return nil, fmt.Errorf("rank %d: connection closed: %v", rank, c.Err())
			}
			allNotes.mu.Lock()
			allNotes.pending[c] = append(allNotes.pending[c], n)
			allNotes.mu.Unlock()
		case <-deadline:
			return nil, fmt.Errorf("rank %d: no notification within %v", rank, limit)
		}
	}
}

// takeRank attaches to a rank and takes control; with stop, it sends SIGSTOP and waits for
// the rank to stop.
func (rt *rankTool) takeRank(rank int, stop bool) error {
	c := rt.clients[rank]
	ctx := context.Background()
	if _, err := c.Attach(ctx, uint32(rank), cdti.RankInHeader, cdti.NewTag("test"), 50); err != nil {
		return fmt.Errorf("rank %d: attach: %w", rank, err)
	}
	set := cdti.Signals(int(syscall.SIGTRAP), int(syscall.SIGSTOP))
	sig := uint32(0)
	if stop {
		sig = uint32(syscall.SIGSTOP)
	}
	if _, err := c.Control(ctx, uint32(rank), cdti.Control{NotifySet: set, SendSignal: sig,
		DynamicNotify: cdti.DynamicNotifyDLoader, WatchPolicy: cdti.WatchNoPropagate}); err != nil {
		return fmt.Errorf("rank %d: control: %w", rank, err)
	}
	if !stop {
		return nil
	}
	n, err := rt.next(rank, 20*time.Second)
	if err != nil {
		return err
	}
	if n.Kind != cdti.NotifyTypeSignal || n.Signal.Signal != uint32(syscall.SIGSTOP) {
		return fmt.Errorf("rank %d: first notification %+v, want SIGSTOP", rank, n)
	}
	return nil
}

// loadBias is the rank's executable load bias: AT_ENTRY minus the file's e_entry.
func (rt *rankTool) loadBias(rank int, entry uint64) (uint64, error) {
	rs, err := rt.clients[rank].Query(context.Background(), uint32(rank), &cdti.GetAuxVectors{})
	if err != nil {
		return 0, err
	}
	a, ok := rs[0].Ack.(*cdti.GetAuxVectorsAck)
	if !ok || rs[0].Code != cdti.CmdSuccess {
		return 0, fmt.Errorf("rank %d: auxv: %v", rank, rs[0].Code)
	}
	for i := 0; i+1 < len(a.Words); i += 2 {
		if a.Words[i] == 9 { // AT_ENTRY
			return a.Words[i+1] - entry, nil
		}
	}
	return 0, fmt.Errorf("rank %d: no AT_ENTRY", rank)
}

// rdi reads a thread's rdi register.
func (rt *rankTool) rdi(rank int, tid uint32) (uint64, error) {
	b, err := rt.clients[rank].RegisterSet(context.Background(), uint32(rank), tid, cdti.RegSetGeneral)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[x86RDI:]), nil
}
