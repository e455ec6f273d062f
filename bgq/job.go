package bgq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// Config describes a job on the emulated system and the system around it.
type Config struct {
	// Hpcdap is the hpcdap binary whose agent is each compute node's CNK.
	Hpcdap string
	// Emulator is the QEMU user-mode emulator of the compute nodes' programs: a name
	// (qemu-ppc64) or a path.
	Emulator string
	// Root holds one directory per I/O node (<Root>/ion<k>/). DefaultRoot gives the usual one.
	Root string
	// NP is the number of ranks, RanksPerNode how many a compute node runs (at most
	// cdti.MaxRanksPerNode), CNPerION how many compute nodes an I/O node serves.
	NP, RanksPerNode, CNPerION int
	// Exe, Args, Envs ("NAME=VALUE") and Cwd are the program of every rank.
	Exe  string
	Args []string
	Envs []string
	Cwd  string
	// JobID is the job's id (nonzero).
	JobID uint64
	// Output receives the ranks' output and the agents' messages (default os.Stderr).
	Output *os.File
	// ToolTimeout is how long a tool's status file may go untouched before jobctld treats
	// the tool as gone (60 s on BG/Q, the default).
	ToolTimeout time.Duration
	// Logf receives diagnostics (default: none).
	Logf func(format string, args ...any)

	// traceLink, when set, receives every frame a toolctld writes to its CNK link (in false)
	// and reads from it (in true), in order.
	traceLink func(node uint32, in bool, frame []byte)
}

// DefaultToolTimeout is jobctld's tool heartbeat limit.
const DefaultToolTimeout = 60 * time.Second

// DefaultRoot is the per-user directory that holds the I/O nodes when no root is given.
func DefaultRoot() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("hpcdap-bgq-%d", os.Getuid()))
}

// Proc is one entry of runjob's MPIR proc table.
type Proc struct {
	Rank       int
	Host       string // the I/O node's address
	Executable string // absolute
	Node       uint32 // the compute-node id: MPIR's "pid" on BG/Q
}

// Job is a job loaded on the emulated system: its compute nodes running their CNKs with the
// ranks held before their first instruction until Start, and its I/O nodes.
type Job struct {
	cfg  Config
	info jobInfo
	ions []*ioNode

	mu      sync.Mutex
	nextID  uint32
	started bool
	closed  bool
	done    chan struct{}
}

// check validates c and fills its defaults; nothing is started by a bad configuration.
func (c *Config) check() error {
	switch {
	case c.Hpcdap == "":
		return errors.New("no hpcdap binary for the compute nodes")
	case c.NP < 1:
		return fmt.Errorf("--np %d: want at least one rank", c.NP)
	case c.RanksPerNode < 1 || c.RanksPerNode > cdti.MaxRanksPerNode:
		return fmt.Errorf("--ranks-per-node %d: want 1 to %d", c.RanksPerNode, cdti.MaxRanksPerNode)
	case c.CNPerION < 1:
		return fmt.Errorf("--cn-per-ion %d: want at least 1", c.CNPerION)
	case c.Exe == "":
		return errors.New("no executable (--exe)")
	case c.JobID == 0:
		return errors.New("job id 0")
	}
	if c.Emulator == "" {
		c.Emulator = "qemu-ppc64"
	}
	if c.Root == "" {
		c.Root = DefaultRoot()
	}
	if c.Cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("working directory: %w", err)
		}
		c.Cwd = wd
	}
	if !filepath.IsAbs(c.Exe) {
		c.Exe = filepath.Join(c.Cwd, c.Exe)
	}
	if fi, err := os.Stat(c.Exe); err != nil {
		return fmt.Errorf("executable: %w", err)
	} else if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("executable %s: not an executable file", c.Exe)
	}
	if c.Output == nil {
		c.Output = os.Stderr
	}
	if c.ToolTimeout <= 0 {
		c.ToolTimeout = DefaultToolTimeout
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// makeRoot creates root as a private directory, or checks that an existing one is private
// and the user's own.
func makeRoot(root string) error {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("root %s: %w", root, err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("root %s: %w", root, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 || !ok || int(st.Uid) != os.Getuid() {
		return fmt.Errorf("root %s: not a private directory of this user (mode %v)", root, fi.Mode())
	}
	return nil
}

// Load loads a job: its I/O nodes' directories, one CNK per compute node with its ranks held,
// one toolctld per compute node with its symlinks (SetupJob), and jobctld's entries. On
// failure whatever was started is ended.
func Load(ctx context.Context, cfg Config) (*Job, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("bgq: load job: %w", err)
	}
	if err := makeRoot(cfg.Root); err != nil {
		return nil, fmt.Errorf("bgq: load job %d: %w", cfg.JobID, err)
	}
	argv := append([]string{cfg.Exe}, cfg.Args...)
	j := &Job{cfg: cfg, nextID: 1, done: make(chan struct{}),
		info: jobInfo{id: cfg.JobID, exe: cfg.Exe, wdir: cfg.Cwd, argv: argv, env: cfg.Envs}}
	nodes := (cfg.NP + cfg.RanksPerNode - 1) / cfg.RanksPerNode
	ok := false
	defer func() {
		if !ok {
			j.Close()
		}
	}()
	for k := 0; k*cfg.CNPerION < nodes; k++ {
		n, err := newIONode(cfg.Root, k)
		if err != nil {
			return nil, fmt.Errorf("bgq: load job %d: %w", cfg.JobID, err)
		}
		if err := n.setupJob(j.info); err != nil {
			return nil, fmt.Errorf("bgq: load job %d: %w", cfg.JobID, err)
		}
		j.ions = append(j.ions, n)
	}
	type started struct {
		i   int
		cn  *computeNode
		err error
	}
	results := make(chan started, nodes)
	for i := 0; i < nodes; i++ {
		go func() {
			cn, err := j.startNode(ctx, uint32(i))
			results <- started{i, cn, err}
		}()
	}
	cns := make([]*computeNode, nodes)
	var errs []error
	for range nodes {
		r := <-results
		cns[r.i] = r.cn
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	for i, cn := range cns {
		if cn != nil {
			n := j.ions[i/cfg.CNPerION]
			n.nodes = append(n.nodes, cn)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("bgq: load job %d: %w", cfg.JobID, errors.Join(errs...))
	}
	ok = true
	go j.watchTools()
	return j, nil
}

// startNode starts compute node node's CNK and toolctld and sets the job up on its toolctld.
func (j *Job) startNode(ctx context.Context, node uint32) (*computeNode, error) {
	cfg := &j.cfg
	ion := j.ions[int(node)/cfg.CNPerION]
	first := int(node) * cfg.RanksPerNode
	count := min(cfg.RanksPerNode, cfg.NP-first)
	c, err := startCNK(ctx, cnkSpec{hpcdap: cfg.Hpcdap, emulator: cfg.Emulator, node: node, firstRank: first,
		ranks: count, jobSize: cfg.NP, jobID: cfg.JobID, argv: j.info.argv, env: cfg.Envs, dir: cfg.Cwd,
		log: filepath.Join(ion.logs, fmt.Sprintf("job%d.cnk%d.log", cfg.JobID, node)), output: cfg.Output})
	if err != nil {
		return nil, err
	}
	link, err := c.dialLink(ctx)
	if err != nil {
		c.kill()
		return nil, err
	}
	path := ion.socketPath(node)
	var trace func(bool, []byte)
	if cfg.traceLink != nil {
		trace = func(in bool, b []byte) { cfg.traceLink(node, in, b) }
	}
	ctl, err := startToolctld(path, node, cfg.JobID, c.ranks, link, trace, cfg.Logf)
	if err != nil {
		link.Close()
		c.kill()
		return nil, err
	}
	setup := &cdti.SetupJob{Header: cdti.Header{JobID: cfg.JobID}, Ranks: c.ranks,
		UserID: uint32(os.Getuid()), GroupID: uint32(os.Getgid()), NodeID: node}
	if err := ion.setupToolctl(path, setup); err != nil {
		ctl.close()
		c.kill()
		return nil, err
	}
	return &computeNode{cnk: c, ctl: ctl}, nil
}

// Proctable is runjob's MPIR proc table: one entry per rank.
func (j *Job) Proctable() []Proc {
	t := make([]Proc, 0, j.cfg.NP)
	for _, n := range j.ions {
		for _, cn := range n.nodes {
			for _, r := range cn.cnk.ranks {
				t = append(t, Proc{Rank: int(r), Host: n.host, Executable: j.info.exe, Node: cn.cnk.node})
			}
		}
	}
	return t
}

// ID is the job's id.
func (j *Job) ID() uint64 { return j.cfg.JobID }

// JobsDirs lists the jobs directory of each I/O node (what /jobs is on each).
func (j *Job) JobsDirs() []string {
	var ds []string
	for _, n := range j.ions {
		ds = append(ds, n.jobs)
	}
	return ds
}

// Start starts the job (StartJob): every rank that no tool holds begins to run.
func (j *Job) Start() error {
	j.mu.Lock()
	if j.started {
		j.mu.Unlock()
		return nil
	}
	j.started = true
	j.mu.Unlock()
	var errs []error
	for _, n := range j.ions {
		for _, cn := range n.nodes {
			if err := cn.ctl.startRanks(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("bgq: start job %d: %w", j.cfg.JobID, errors.Join(errs...))
	}
	return nil
}

// Wait returns when every rank has exited (polling the CNKs every interval), or with ctx's
// error.
func (j *Job) Wait(ctx context.Context, interval time.Duration) error {
	for {
		live := 0
		for _, n := range j.ions {
			for _, cn := range n.nodes {
				rs, err := cn.ctl.running()
				if err != nil {
					return fmt.Errorf("bgq: wait for job %d: %w", j.cfg.JobID, err)
				}
				live += len(rs)
			}
		}
		if live == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// StartTool starts a tool on every I/O node of the job with the next tool id (from 1), and
// returns that id.
func (j *Job) StartTool(path string, args []string) (uint32, error) {
	return j.StartToolOn(path, args, nil)
}

// StartToolOn is StartTool on the I/O nodes that serve a rank for which rank returns true
// (every I/O node when rank is nil): runjob's subset attach.
func (j *Job) StartToolOn(path string, args []string, rank func(int) bool) (uint32, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(j.cfg.Cwd, path)
	}
	if fi, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("bgq: start tool: %w", err)
	} else if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return 0, fmt.Errorf("bgq: start tool %s: not an executable file", path)
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return 0, fmt.Errorf("bgq: start tool %s: job %d has ended", path, j.cfg.JobID)
	}
	id := j.nextID
	j.nextID++
	j.mu.Unlock()
	var ions []*ioNode
	for _, n := range j.ions {
		if rank == nil || n.serves(rank) {
			ions = append(ions, n)
		}
	}
	if len(ions) == 0 {
		return 0, fmt.Errorf("bgq: start tool %s: no I/O node serves the subset", path)
	}
	for i, n := range ions {
		if err := n.startTool(j.info, id, path, args, j.cfg.Output, j.cfg.Output); err != nil {
			for _, m := range ions[:i] {
				m.endTool(id, 5*time.Second)
			}
			return 0, fmt.Errorf("bgq: %w", err)
		}
	}
	return id, nil
}

// EndTool ends tool id with SIGTERM on every I/O node (SIGKILL after grace).
func (j *Job) EndTool(id uint32, grace time.Duration) error {
	found := false
	for _, n := range j.ions {
		if n.endTool(id, grace) {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("bgq: end tool %d of job %d: no such tool", id, j.cfg.JobID)
	}
	return nil
}

// ToolRunning reports whether tool id still runs on some I/O node.
func (j *Job) ToolRunning(id uint32) bool {
	for _, n := range j.ions {
		if n.tool(id) != nil {
			return true
		}
	}
	return false
}

// watchTools ends the tools whose status file goes untouched for the tool timeout.
func (j *Job) watchTools() {
	period := j.cfg.ToolTimeout / 4
	for {
		select {
		case <-j.done:
			return
		case <-time.After(period):
		}
		for _, n := range j.ions {
			for _, id := range n.staleTools(j.cfg.JobID, j.cfg.ToolTimeout) {
				j.cfg.Logf("bgq: I/O node %d: tool %d has not touched its status file for %v: ending it", n.index, id, j.cfg.ToolTimeout)
				n.endTool(id, 5*time.Second)
			}
		}
	}
}

// Close ends the job: its tools, toolctlds and CNKs (killing the ranks), and removes its
// /jobs/<id> directories.
func (j *Job) Close() {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return
	}
	j.closed = true
	close(j.done)
	j.mu.Unlock()
	for _, n := range j.ions {
		n.endJob(j.cfg.JobID, 5*time.Second)
		for _, cn := range n.nodes {
			cn.ctl.close()
			cn.cnk.kill()
		}
	}
}
