package bgq

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/ppc64"
)

// Built once for the package's tests: the hpcdap binary with the runjob helper beside it (as
// make build places them), and
// testdata/ranks.c as a static big-endian ELFv1 Power program.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func built(t testing.TB) (hpcdap, ranks string) {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "hpcdap-bgq-test-")
		if buildErr != nil {
			return
		}
		if buildErr = testenv.Build("golang", "go", "build", "-o", filepath.Join(buildDir, "hpcdap"), "github.com/hpcdap/hpcdap/cmd/hpcdap"); buildErr != nil {
			return
		}
		if buildErr = testenv.Build("gcc", "gcc", "-g", "-O0", "-o", filepath.Join(buildDir, HelperName),
			filepath.Join("helper", "runjob.c")); buildErr != nil {
			return
		}
		buildErr = testenv.Build("gcc-powerpc64-linux-gnu", "powerpc64-linux-gnu-gcc", "-g", "-O0", "-static",
			"-o", filepath.Join(buildDir, "ranks"), filepath.Join("testdata", "ranks.c"))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "hpcdap"), filepath.Join(buildDir, "ranks")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// workEntry is where a breakpoint on work goes (the code entry its .opd descriptor names).
func workEntry(t testing.TB, exe string) uint64 {
	t.Helper()
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := ppc64.NewResolver(f)
	if err != nil {
		t.Fatal(err)
	}
	e, err := r.Lookup("work")
	if err != nil {
		t.Fatal(err)
	}
	return e.Breakpoint()
}

// testJob loads a job of np ranks of testdata/ranks.c (with args), rpn per compute node and
// cpi compute nodes per I/O node, closed at the end of the test; output is where the ranks
// print.
func testJob(t testing.TB, np, rpn, cpi int, trace func(uint32, bool, []byte), args ...string) (*Job, string) {
	t.Helper()
	hpcdap, exe := built(t)
	out := filepath.Join(t.TempDir(), "output")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := Load(ctx, Config{Hpcdap: hpcdap, Emulator: testenv.QEMUUser(t, "qemu-ppc64"), Root: shortDir(t),
		NP: np, RanksPerNode: rpn, CNPerION: cpi, Exe: exe, Args: args, JobID: 77, Output: f, traceLink: trace,
		Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	return j, out
}

// shortDir is a private temporary directory with a path short enough for socket names.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "bgq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// recorder is a connection that keeps a copy of every byte written to it.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.buf.Write(b)
	r.mu.Unlock()
	return r.Conn.Write(b)
}

// frames splits what was written into messages.
func (r *recorder) frames(t testing.TB) [][]byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var fs [][]byte
	rd := bytes.NewReader(r.buf.Bytes())
	for rd.Len() > 0 {
		b, err := cdti.ReadFrame(rd)
		if err != nil {
			t.Fatalf("frames the tool wrote: %v", err)
		}
		fs = append(fs, b)
	}
	return fs
}

// dialTool connects a tool with id toolID to a toolctl socket (a /jobs/<id>/toolctl_* link).
func dialTool(t testing.TB, path string, toolID uint32, jobID uint64) (*cdti.Client, *recorder) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Conn: c}
	cl := cdti.NewClient(rec, cdti.ClientOptions{ToolID: toolID, JobID: jobID, Serialize: true, Timeout: time.Minute})
	t.Cleanup(func() { cl.Close() })
	return cl, rec
}

// nextNotify waits for a Notify.
func nextNotify(t testing.TB, c *cdti.Client) *cdti.Notify {
	t.Helper()
	select {
	case n, ok := <-c.Notifications():
		if !ok {
			t.Fatalf("connection ended waiting for a notify: %v", c.Err())
		}
		return n
	case <-time.After(2 * time.Minute):
		t.Fatal("no notify within 2 minutes")
	}
	return nil
}

// update sends an Update and fails the test unless every command succeeded.
func update(t testing.TB, c *cdti.Client, rank uint32, cmds ...cdti.Command) {
	t.Helper()
	rs, err := c.Update(context.Background(), rank, cmds...)
	if err != nil {
		t.Fatalf("update rank %d: %v", rank, err)
	}
	for i, r := range rs {
		if r.Code != cdti.CmdSuccess {
			t.Fatalf("update rank %d: command %d (%T): %v", rank, i, cmds[i], r.Code)
		}
	}
}

// nodePath is toolctl_node/<node> of the job on I/O node ion.
func nodePath(j *Job, ion int, node uint32) string {
	return filepath.Join(j.ions[ion].jobDir(j.ID()), "toolctl_node", fmt.Sprint(node))
}

// outputLines waits for the job to end and returns what its ranks printed.
func waitOutput(t *testing.T, j *Job, out string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := j.Wait(ctx, 100*time.Millisecond); err != nil {
		t.Fatalf("wait for the job: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var _ = exec.Command
