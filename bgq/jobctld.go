package bgq

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// JobsEnv names the environment variable that tells a tool started by the emulated jobctld
// where its I/O node's jobs directory is. On a real I/O node it is /jobs and the variable is
// not set.
const JobsEnv = "HPCDAP_BGQ_JOBS"

// ioNode is one I/O node: a root directory holding jobs/ and var/cios/, the toolctlds of its
// compute nodes, and its jobctld's tools.
type ioNode struct {
	index int
	host  string // the I/O node's address, as runjob's proc table gives it
	root  string
	jobs  string // <root>/jobs: /jobs on a real I/O node
	cios  string // <root>/var/cios
	logs  string // <root>/var/log: the CNKs' logs
	nodes []*computeNode

	mu    sync.Mutex
	tools map[uint32]*tool
}

// computeNode is a compute node with its CNK and its toolctld.
type computeNode struct {
	cnk *cnk
	ctl *toolctld
}

// tool is a tool process that jobctld started on an I/O node.
type tool struct {
	id    uint32
	cmd   *exec.Cmd
	ended chan struct{}
	err   error
}

// newIONode makes the I/O node's directories.
func newIONode(root string, index int) (*ioNode, error) {
	dir := filepath.Join(root, "ion"+strconv.Itoa(index))
	n := &ioNode{index: index, host: "ion" + strconv.Itoa(index), root: dir, jobs: filepath.Join(dir, "jobs"),
		cios: filepath.Join(dir, "var", "cios"), logs: filepath.Join(dir, "var", "log"), tools: map[uint32]*tool{}}
	for _, d := range []string{n.jobs, n.cios, n.logs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("I/O node %d: %w", index, err)
		}
	}
	return n, nil
}

// serves reports whether a rank of the I/O node's compute nodes satisfies rank.
func (n *ioNode) serves(rank func(int) bool) bool {
	for _, cn := range n.nodes {
		for _, r := range cn.cnk.ranks {
			if rank(int(r)) {
				return true
			}
		}
	}
	return false
}

// jobDir is /jobs/<id> on this I/O node.
func (n *ioNode) jobDir(id uint64) string {
	return filepath.Join(n.jobs, strconv.FormatUint(id, 10))
}

// socketPath is the toolctld socket of compute node node.
func (n *ioNode) socketPath(node uint32) string {
	return filepath.Join(n.cios, "toolcontrol.data."+strconv.FormatUint(uint64(node), 10))
}

// jobInfo is what jobctld records of a job.
type jobInfo struct {
	id   uint64
	exe  string
	wdir string
	argv []string
	env  []string
}

// setupJob writes jobctld's entries of /jobs/<id>/ (cdti-v6.md §2.3).
func (n *ioNode) setupJob(j jobInfo) error {
	dir := n.jobDir(j.id)
	fail := func(err error) error { return fmt.Errorf("I/O node %d: set up job %d: %w", n.index, j.id, err) }
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fail(err)
	}
	for _, d := range []string{"toolctl_rank", "toolctl_node", "tools", "tools_status"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return fail(err)
		}
	}
	gids, err := os.Getgroups()
	if err != nil {
		return fail(err)
	}
	gs := []string{strconv.Itoa(os.Getgid())}
	for _, g := range gids {
		if g != os.Getgid() {
			gs = append(gs, strconv.Itoa(g))
		}
	}
	files := map[string]string{
		"cmdline":   nulList(j.argv),
		"environ":   nulList(j.env),
		"loginuid":  strconv.Itoa(os.Getuid()) + "\n",
		"logingids": strings.Join(gs, " ") + "\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			return fail(err)
		}
	}
	for name, target := range map[string]string{"exe": j.exe, "wdir": j.wdir} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			return fail(err)
		}
	}
	return nil
}

// nulList is strings each ended by a NUL, as /proc/<pid>/cmdline holds them.
func nulList(s []string) string {
	var b strings.Builder
	for _, x := range s {
		b.WriteString(x)
		b.WriteByte(0)
	}
	return b.String()
}

// setupToolctl is what a toolctld does at SetupJob (§2.2): toolctl_rank/<r> for each rank of
// the message and toolctl_node/<n> link to the socket, and tools/protocol holds the version.
func (n *ioNode) setupToolctl(path string, m *cdti.SetupJob) error {
	dir := n.jobDir(m.JobID)
	fail := func(err error) error { return fmt.Errorf("toolctld %d: set up job %d: %w", m.NodeID, m.JobID, err) }
	for _, r := range m.Ranks {
		if err := os.Symlink(path, filepath.Join(dir, "toolctl_rank", strconv.FormatUint(uint64(r), 10))); err != nil {
			return fail(err)
		}
	}
	if err := os.Symlink(path, filepath.Join(dir, "toolctl_node", strconv.FormatUint(uint64(m.NodeID), 10))); err != nil {
		return fail(err)
	}
	proto := filepath.Join(dir, "tools", "protocol")
	if err := os.WriteFile(proto, []byte(strconv.Itoa(cdti.ProtocolVersion)+"\n"), 0o644); err != nil && !errors.Is(err, os.ErrExist) {
		return fail(err)
	}
	return nil
}

// startTool starts tool id of job j on this I/O node (jobctld, §2.4): BG_JOBID, BG_TOOLID and
// JobsEnv in its environment, tools/<id> naming its executable, tools_status/<id> the file
// whose modification time says it is alive.
func (n *ioNode) startTool(j jobInfo, id uint32, path string, args []string, stdout, stderr *os.File) error {
	dir := n.jobDir(j.id)
	sid := strconv.FormatUint(uint64(id), 10)
	fail := func(err error) error {
		return fmt.Errorf("I/O node %d: start tool %d (%s): %w", n.index, id, path, err)
	}
	status := filepath.Join(dir, "tools_status", sid)
	if err := os.WriteFile(status, nil, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Symlink(path, filepath.Join(dir, "tools", sid)); err != nil {
		os.Remove(status)
		return fail(err)
	}
	cmd := exec.Command(path, args...)
	// jobctld gives a tool these and nothing else of its own environment (cdti-v6.md §2.4),
	// and the emulator where the I/O node's jobs are.
	cmd.Env = []string{"BG_JOBID=" + strconv.FormatUint(j.id, 10), "BG_TOOLID=" + sid, JobsEnv + "=" + n.jobs}
	if v, ok := os.LookupEnv("LD_LIBRARY_PATH"); ok {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+v)
	}
	cmd.Dir = j.wdir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		n.removeTool(j.id, id)
		return fail(err)
	}
	t := &tool{id: id, cmd: cmd, ended: make(chan struct{})}
	n.mu.Lock()
	n.tools[id] = t
	n.mu.Unlock()
	go func() {
		t.err = cmd.Wait()
		n.removeTool(j.id, id)
		n.mu.Lock()
		delete(n.tools, id)
		n.mu.Unlock()
		close(t.ended)
	}()
	return nil
}

// removeTool removes the entries of tool id.
func (n *ioNode) removeTool(job uint64, id uint32) {
	sid := strconv.FormatUint(uint64(id), 10)
	os.Remove(filepath.Join(n.jobDir(job), "tools", sid))
	os.Remove(filepath.Join(n.jobDir(job), "tools_status", sid))
}

// tool returns tool id if it runs on this I/O node.
func (n *ioNode) tool(id uint32) *tool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tools[id]
}

// endTool sends tool id SIGTERM and waits up to grace for it to end, then kills it.
func (n *ioNode) endTool(id uint32, grace time.Duration) bool {
	t := n.tool(id)
	if t == nil {
		return false
	}
	t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.ended:
	case <-time.After(grace):
		t.cmd.Process.Kill()
		<-t.ended
	}
	return true
}

// staleTools lists the tools whose status file has not been touched for timeout (jobctld's
// checkAllToolsStatus): they are treated as gone.
func (n *ioNode) staleTools(job uint64, timeout time.Duration) []uint32 {
	n.mu.Lock()
	ids := make([]uint32, 0, len(n.tools))
	for id := range n.tools {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	var stale []uint32
	for _, id := range ids {
		fi, err := os.Stat(filepath.Join(n.jobDir(job), "tools_status", strconv.FormatUint(uint64(id), 10)))
		if err != nil || time.Since(fi.ModTime()) > timeout {
			stale = append(stale, id)
		}
	}
	return stale
}

// endJob ends the I/O node's tools and removes /jobs/<id> (rm -rf, §2.3).
func (n *ioNode) endJob(job uint64, grace time.Duration) {
	n.mu.Lock()
	ids := make([]uint32, 0, len(n.tools))
	for id := range n.tools {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	for _, id := range ids {
		n.endTool(id, grace)
	}
	os.RemoveAll(n.jobDir(job))
}
