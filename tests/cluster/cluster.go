// Package cluster starts a real multi-node Slurm cluster on this machine for tests: one munged,
// one slurmctld and one slurmd per node, each slurmd in its own UTS and mount namespace so that
// gethostname() says node1, node2, ... in every task, and each node sees a private directory at
// the same path (LocalDir) backed by NodeDir(node). Everything else, /tmp included, the nodes
// share (SharedDir is one such directory): staging can be tried both ways. The cluster is driven by the shell recipe
// slurm-local-cluster.sh next to this file (embedded), on ports picked free at start.
//
// Typical use, one cluster per test package:
//
//	var slurm = cluster.Lazy(cluster.Config{})
//	func TestMain(m *testing.M) { code := m.Run(); slurm.Stop(); os.Exit(code) }
//	func TestX(t *testing.T) { c := slurm.Need(t); out, err := c.Command("srun", "-N4", "hostname").Output() ... }
//
// Stop ends every process that runs with the cluster's configuration (daemons, job steps,
// tasks). A test binary that dies before Stop leaves its cluster running; the next Start of
// this package reaps every cluster whose starting process is gone.
//
// It needs root (namespaces, munged, slurmd) and the Debian packages slurm-wlm (slurmctld,
// slurmd, slurm-client), munge, bc and util-linux.
package cluster

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

//go:embed slurm-local-cluster.sh
var script []byte

// Config sizes a cluster. Zero values take the defaults.
type Config struct {
	Dir         string // working directory (default: a new temporary directory, removed by Stop)
	Nodes       int    // default 4
	CPUsPerNode int    // default 4
	ExtraConf   string // extra slurm.conf lines
}

// Cluster is a running cluster.
type Cluster struct {
	Dir   string   // the cluster's directory (configuration, state, logs, node-local storage)
	Conf  string   // the slurm.conf path: SLURM_CONF for every client
	Nodes []string // node names, node1..nodeN
	CPUs  int      // CPUs per node
	// Startup is how long `start` took until every node was idle.
	Startup time.Duration

	script  string
	env     []string
	ownsDir bool
}

// Required programs and the Debian packages that provide them.
var required = [][2]string{
	{"slurmctld", "slurmctld (slurm-wlm)"}, {"slurmd", "slurmd (slurm-wlm)"}, {"srun", "slurm-client"},
	{"sinfo", "slurm-client"}, {"munged", "munge"}, {"mungekey", "munge"}, {"unshare", "util-linux"},
	{"bc", "bc"},
}

// Start writes the configuration and starts munged, slurmctld and the slurmds, and waits until
// every node is idle.
func Start(cfg Config) (*Cluster, error) {
	for _, r := range required {
		if _, err := exec.LookPath(r[0]); err != nil {
			return nil, fmt.Errorf("cluster: %s not found: install the Debian package %s", r[0], r[1])
		}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("cluster: needs root (slurmd, munged and namespaces)")
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 4
	}
	if cfg.CPUsPerNode <= 0 {
		cfg.CPUsPerNode = 4
	}
	c := &Cluster{Dir: cfg.Dir, CPUs: cfg.CPUsPerNode}
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "slurm-cluster-")
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		c.Dir, c.ownsDir = d, true
	}
	c.Conf = filepath.Join(c.Dir, "etc", "slurm.conf")
	c.script = filepath.Join(c.Dir, "slurm-local-cluster.sh")
	if err := os.WriteFile(c.script, script, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if c.ownsDir {
		// A test binary that dies without running Stop (a panic, go test's -timeout, a
		// killed pipe) leaves its cluster behind; the next start reaps it.
		reapOrphans()
		if err := os.WriteFile(filepath.Join(c.Dir, ownerFile), []byte(processID(os.Getpid())), 0o644); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	base, err := freePorts(cfg.Nodes + 2)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	for i := 1; i <= cfg.Nodes; i++ {
		c.Nodes = append(c.Nodes, "node"+strconv.Itoa(i))
	}
	c.env = append(withoutSlurm(os.Environ()), "SLURM_TEST_DIR="+c.Dir, "NNODES="+strconv.Itoa(cfg.Nodes),
		"CPUS_PER_NODE="+strconv.Itoa(cfg.CPUsPerNode), "CTLD_PORT="+strconv.Itoa(base),
		"SLURMD_BASE_PORT="+strconv.Itoa(base+1), "SLURM_EXTRA_CONF="+cfg.ExtraConf, "SLURM_CONF="+c.Conf)
	t0 := time.Now()
	out, err := c.run(60*time.Second, "start")
	c.Startup = time.Since(t0)
	if err != nil {
		c.run(30*time.Second, "stop")
		return nil, fmt.Errorf("cluster: start: %v\n%s", err, out)
	}
	return c, nil
}

// withoutSlurm drops SLURM_* variables inherited from an enclosing job or cluster.
func withoutSlurm(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SLURM_") {
			out = append(out, kv)
		}
	}
	return out
}

// freePorts finds n consecutive free TCP ports on the loopback interface and returns the
// first. Ports are taken from a range outside the usual ephemeral range.
func freePorts(n int) (int, error) {
	start := 20000 + (os.Getpid()*7)%20000
	for try := 0; try < 200; try++ {
		base := 20000 + (start-20000+try*(n+3))%20000
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", "0.0.0.0:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("no block of free ports")
}

func (c *Cluster) run(limit time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	cmd.Env = c.env
	return cmd.CombinedOutput()
}

// Env is the environment for Slurm clients: this process's, with SLURM_CONF set and no other
// SLURM_* variable.
func (c *Cluster) Env() []string {
	return append(withoutSlurm(os.Environ()), "SLURM_CONF="+c.Conf)
}

// Command returns a command run with the cluster's environment.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.Env()
	return cmd
}

// CommandContext is Command with a context that kills the command.
func (c *Cluster) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.Env()
	return cmd
}

// LocalDir is the node-local directory as tasks see it: the same path on every node, backed
// by a different directory (NodeDir) on each.
func (c *Cluster) LocalDir() string { return filepath.Join(c.Dir, "local") }

// NodeDir is where node's LocalDir really lives, as the host sees it.
func (c *Cluster) NodeDir(node string) string { return filepath.Join(c.Dir, "nodelocal", node) }

// SharedDir is a directory every node sees as the same one, as a shared or parallel file
// system would show it: the nodes share the host's file system (its /tmp among it), all but
// LocalDir.
func (c *Cluster) SharedDir() string { return filepath.Join(c.Dir, "shared") }

// ReadOnlyLocalDir makes node's LocalDir read-only for everything that runs on that node (a
// read-only bind mount in its mount namespace, which root cannot write either) until the
// returned function undoes it.
func (c *Cluster) ReadOnlyLocalDir(node string) (undo func() error, err error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "run", "slurmd-"+node+".pid"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", node, err)
	}
	pid := strings.TrimSpace(string(b))
	remount := func(mode string) error {
		out, err := exec.Command("nsenter", "--mount=/proc/"+pid+"/ns/mnt", "mount", "-o", "remount,bind,"+mode, c.LocalDir()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cluster: %s: remount %s %s: %v: %s", node, c.LocalDir(), mode, err, bytes.TrimSpace(out))
		}
		return nil
	}
	if err := remount("ro"); err != nil {
		return nil, err
	}
	return func() error { return remount("rw") }, nil
}

// IdleNodes reports how many nodes are idle: free, and neither drained nor down.
func (c *Cluster) IdleNodes() (int, error) {
	nodes, err := c.nodeStates()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, st := range nodes {
		if st.state == "idle" {
			n++
		}
	}
	return n, nil
}

// nodeState is a node's state and, for a drained or down node, the reason Slurm gives.
type nodeState struct{ name, state, reason string }

// nodeStates lists every node's state as sinfo reports it (idle, allocated, drained, ...).
func (c *Cluster) nodeStates() ([]nodeState, error) {
	out, err := c.Command("sinfo", "-h", "-N", "-o", "%N|%T|%E").Output()
	if err != nil {
		return nil, fmt.Errorf("cluster: sinfo: %w", err)
	}
	var nodes []nodeState
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.SplitN(l, "|", 3); len(f) == 3 {
			nodes = append(nodes, nodeState{f[0], f[1], f[2]})
		}
	}
	return nodes, nil
}

// WaitIdle waits until no job is left in the queue and every node is idle, so that the next
// test gets the whole cluster. A node an earlier job left drained (Slurm drains a node whose
// tasks it failed to kill) is resumed once the queue is empty, and named in the returned
// list with its reason, so that one test's failure does not fail every later one.
func (c *Cluster) WaitIdle(ctx context.Context) (resumed []string, err error) {
	asked := map[string]bool{} // a resumed node is drained until slurmctld has seen to it
	for {
		q, err := c.Command("squeue", "-h", "-o", "%i").Output()
		queueEmpty := err == nil && len(bytes.TrimSpace(q)) == 0
		nodes, err := c.nodeStates()
		idle := 0
		for _, st := range nodes {
			switch {
			case st.state == "idle":
				idle++
			case queueEmpty && (st.state == "drained" || st.state == "down") && !asked[st.name]:
				if c.Command("scontrol", "update", "NodeName="+st.name, "State=RESUME").Run() == nil {
					asked[st.name] = true
					resumed = append(resumed, fmt.Sprintf("%s (%s: %s)", st.name, st.state, st.reason))
				}
			}
		}
		if queueEmpty && err == nil && idle == len(c.Nodes) {
			return resumed, nil
		}
		select {
		case <-ctx.Done():
			return resumed, fmt.Errorf("cluster: not idle (queue %q, nodes %v): %w", bytes.TrimSpace(q), nodes, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Logs returns the tail of every daemon log, for failure reports.
func (c *Cluster) Logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(c.Dir, "log", "*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "==> %s <==\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// Stop cancels every job, shuts the daemons down (only the processes this cluster started)
// and removes the directory if Start created it.
func (c *Cluster) Stop() error {
	out, err := c.run(60*time.Second, "stop")
	// Job steps whose tasks could not be cancelled (a task stopped under a tracer that went
	// away) outlive the daemons: end every process that runs with this cluster's
	// configuration.
	killByConf(c.Conf)
	if err != nil {
		return fmt.Errorf("cluster: stop: %v\n%s", err, out)
	}
	if c.ownsDir {
		return os.RemoveAll(c.Dir)
	}
	return nil
}

// ownerFile, in a cluster's directory, identifies the process that started it.
const ownerFile = "owner"

// processID names a process across pid reuse: its pid and its start time (field 22 of
// /proc/PID/stat), or "" if it does not exist.
func processID(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces: count fields after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return strconv.Itoa(pid) + " " + f[19]
}

// reapOrphans stops the clusters (of this harness, in the temporary directory) whose starting
// process is gone, and removes their directories.
func reapOrphans() {
	owners, _ := filepath.Glob(filepath.Join(os.TempDir(), "slurm-cluster-*", ownerFile))
	for _, o := range owners {
		b, err := os.ReadFile(o)
		if err != nil {
			continue
		}
		pid, _, _ := strings.Cut(string(b), " ")
		n, err := strconv.Atoi(pid)
		if err != nil || processID(n) == string(b) {
			continue // still running, or not ours to judge
		}
		dir := filepath.Dir(o)
		conf := filepath.Join(dir, "etc", "slurm.conf")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "slurm-local-cluster.sh"), "stop")
		cmd.Env = append(withoutSlurm(os.Environ()), "SLURM_TEST_DIR="+dir, "SLURM_CONF="+conf)
		cmd.Run()
		cancel()
		killByConf(conf)
		os.RemoveAll(dir)
	}
}

// killByConf kills every process (but this one) whose environment names conf as SLURM_CONF:
// the daemons, job steps and tasks of one cluster, and clients talking to it.
func killByConf(conf string) {
	for _, pid := range pidsByConf(conf) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// pidsByConf lists the processes (but this one) whose environment names conf as SLURM_CONF.
func pidsByConf(conf string) []int {
	want := []byte("SLURM_CONF=" + conf + "\x00")
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	var out []int
	for _, e := range envs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		if bytes.HasPrefix(b, want) || bytes.Contains(b, append([]byte{0}, want...)) {
			out = append(out, pid)
		}
	}
	return out
}

// Processes describes the cluster's processes that belong to a job (their environment has
// SLURM_JOB_ID), one line each: pid, parent, command, state, tracer, kernel wait channel and
// pending signals, for failure reports.
func (c *Cluster) Processes() string {
	var b strings.Builder
	for _, pid := range pidsByConf(c.Conf) {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if !bytes.Contains(env, []byte("\x00SLURM_JOB_ID=")) && !bytes.HasPrefix(env, []byte("SLURM_JOB_ID=")) {
			continue
		}
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		field := func(name string) string {
			for _, l := range strings.Split(string(st), "\n") {
				if v, ok := strings.CutPrefix(l, name+":"); ok {
					return strings.TrimSpace(v)
				}
			}
			return "?"
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		wchan, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/wchan")
		fmt.Fprintf(&b, "pid %d ppid %s %q state %s tracer %s wchan %s sigpnd %s shdpnd %s\n", pid, field("PPid"),
			strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")), field("State"), field("TracerPid"),
			wchan, field("SigPnd"), field("ShdPnd"))
	}
	return b.String()
}

// Shared is a cluster started on first use and stopped by Stop: one per test package.
type Shared struct {
	cfg  Config
	once sync.Once
	c    *Cluster
	err  error
}

// Lazy returns a Shared cluster with the given configuration; nothing starts yet.
func Lazy(cfg Config) *Shared { return &Shared{cfg: cfg} }

// Get starts the cluster on the first call and returns it.
func (s *Shared) Get() (*Cluster, error) {
	s.once.Do(func() { s.c, s.err = Start(s.cfg) })
	return s.c, s.err
}

// Need returns the cluster, failing the test if it cannot run, and waits until it is idle.
func (s *Shared) Need(t testing.TB) *Cluster {
	t.Helper()
	c, err := s.Get()
	if err != nil {
		t.Fatalf("slurm test cluster: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resumed, err := c.WaitIdle(ctx)
	if len(resumed) > 0 {
		t.Logf("cluster: resumed nodes an earlier test left drained: %s", strings.Join(resumed, ", "))
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs())
	}
	return c
}

// Stop stops the cluster if it was started.
func (s *Shared) Stop() error {
	if s.c == nil {
		return nil
	}
	return s.c.Stop()
}
