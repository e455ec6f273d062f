package mpir

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/procimage"
)

// Built once per test binary, on first use (fuzz workers, which run TestMain too, need none).
var (
	testDir   string
	ompiProg  string // ../testdata/mpi_ranks.c with mpicc.openmpi
	pollProg  string // testdata/polling_starter.c with gcc
	agentBin  string // the hpcdap binary, for `hpcdap agent`
	buildOnce sync.Once
	buildErrs = map[string]error{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mpir-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = dir
	ompiProg = filepath.Join(dir, "mpi_ranks_ompi")
	agentBin = filepath.Join(dir, "hpcdap")
	pollProg = filepath.Join(dir, "polling_starter")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func build() {
	buildErrs[ompiProg] = testenv.Build("libopenmpi-dev", "mpicc.openmpi", "-g", "-O0", "-o",
		ompiProg, "../testdata/mpi_ranks.c")
	buildErrs[pollProg] = testenv.Build("gcc", "gcc", "-g", "-O0", "-o", pollProg, "testdata/polling_starter.c")
	buildErrs[agentBin] = testenv.Build("golang", "go", "build", "-o", agentBin, "github.com/hpcdap/hpcdap/cmd/hpcdap")
}

func need(t testing.TB, paths ...string) {
	t.Helper()
	buildOnce.Do(build)
	for _, p := range paths {
		if err := buildErrs[p]; err != nil {
			t.Fatalf("building %s: %v", filepath.Base(p), err)
		}
	}
}

// ompiEnv is the environment for Open MPI's mpirun as root on a 2-core machine.
func ompiEnv() []string {
	return append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
		"OMPI_MCA_rmaps_base_oversubscribe=1", "OMPI_MPIR_DO_NOT_WARN=1", "OMPI_MCA_orte_abort_on_non_zero_status=0")
}

// procMem reads a process's memory through /proc/PID/mem: the test's independent reader.
type procMem struct{ f *os.File }

func openProcMem(t testing.TB, pid int) procMem {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatalf("open /proc/%d/mem: %v", pid, err)
	}
	t.Cleanup(func() { f.Close() })
	return procMem{f}
}

func (m procMem) ReadMemory(_ context.Context, addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := m.f.ReadAt(b, int64(addr)); err != nil {
		return nil, err
	}
	return b, nil
}

// procAuxv reads /proc/PID/auxv as words.
func procAuxv(t testing.TB, pid int) Auxv {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/auxv")
	if err != nil {
		t.Fatal(err)
	}
	words := make([]uint64, len(b)/8)
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return procimage.AuxvFromWords(words)
}

// libPath finds the file a program loads for a library name, with ldd as the oracle.
func libPath(t testing.TB, prog, lib string) string {
	t.Helper()
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", prog, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasPrefix(f[0], lib) && f[1] == "=>" {
			return f[2]
		}
	}
	t.Fatalf("ldd %s does not list %s:\n%s", prog, lib, out)
	return ""
}

// agent is an `hpcdap agent` child serving one spawned launcher.
type agent struct {
	cmd    *exec.Cmd
	client *cdti.Client
	log    string
	out    string
	done   chan struct{}
}

// startAgent spawns argv under a new agent and connects a CDTI client to it.
func startAgent(t testing.TB, env []string, argv ...string) *agent {
	t.Helper()
	return startAgentMode(t, env, func(out string) []string {
		return append([]string{"--output", out, "--np", "1", "--"}, argv...)
	})
}

// attachAgent starts an agent that serves the running process pid as rank 0 and connects a
// CDTI client to it.
func attachAgent(t testing.TB, pid int) *agent {
	t.Helper()
	return startAgentMode(t, os.Environ(), func(string) []string { return []string{"--attach", "0=" + strconv.Itoa(pid)} })
}

// startAgentMode starts an agent with the arguments mode gives (given the output file) after
// its listener's, and connects a CDTI client to it.
func startAgentMode(t testing.TB, env []string, mode func(out string) []string) *agent {
	t.Helper()
	need(t, agentBin)
	dir := t.TempDir()
	a := &agent{log: filepath.Join(dir, "agent.log"), out: filepath.Join(dir, "out"), done: make(chan struct{})}
	token := "mpir-test-token"
	args := append([]string{"agent", "--listen", "127.0.0.1:0", "--log", a.log}, mode(a.out)...)
	a.cmd = exec.Command(agentBin, args...)
	a.cmd.Env = append(env, "HPCDAP_TOKEN="+token)
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	go func() { a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		if a.client != nil {
			a.client.Close()
		}
		a.cmd.Process.Signal(os.Interrupt)
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
			a.cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(a.log)
			o, _ := os.ReadFile(a.out)
			t.Logf("agent log:\n%s\nlauncher output:\n%s", b, o)
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				line <- addr
			}
		}
		close(line)
	}()
	var addr string
	select {
	case addr = <-line:
	case <-time.After(30 * time.Second):
	}
	if addr == "" {
		t.Fatalf("agent did not report its address")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cdti.Dial(ctx, "tcp", addr, cdti.ClientOptions{ToolID: 7, Token: []byte(token), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("dial agent %s: %v", addr, err)
	}
	a.client = c
	return a
}

// rankPids finds the ranks of a job as the oracle sees them: descendants of root whose
// executable is prog, with their rank from the environment variable rankVar.
func rankPids(t testing.TB, root int, prog, rankVar string) map[int]int {
	t.Helper()
	want, err := filepath.EvalSymlinks(prog)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	var walk func(pid int)
	walk = func(pid int) {
		for _, c := range children(pid) {
			if exe, err := os.Readlink("/proc/" + strconv.Itoa(c) + "/exe"); err == nil && exe == want {
				if v, ok := testenv.ProcEnv(c, rankVar); ok {
					if r, err := strconv.Atoi(v); err == nil {
						out[r] = c
					}
				}
			}
			walk(c)
		}
	}
	walk(root)
	return out
}

// children lists a process's children from /proc/PID/task/*/children.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
