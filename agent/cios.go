package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// The agent as a Blue Gene/Q CIOS tool. On a BG/Q, jobctld starts a job's tools on each I/O
// node with BG_JOBID and BG_TOOLID in their environment; a tool finds the job under
// /jobs/<id>/ and reaches each compute node's kernel (the CNK) through the toolctld of that
// node, whose socket /jobs/<id>/toolctl_node/<n> names (cdti-v6.md §2). There the agent
// controls no process itself: it relays the front end's CDTI to those sockets unaltered
// (ciosRelay), touches its status file so that jobctld knows it alive, and on its end gives
// every rank back as a tool must on BG/Q, where toolctld does not tell the CNK that a tool's
// socket closed.

// CIOSJob is the job a CIOS tool serves, as jobctld and toolctld describe it.
type CIOSJob struct {
	ID     uint64
	ToolID uint32
	Dir    string            // /jobs/<id>
	Nodes  map[uint32]string // compute-node id → its toolctld's socket (toolctl_node/<n>)
	Ranks  map[uint32]uint32 // rank → compute-node id
	Exe    string            // the job's executable (the target of /jobs/<id>/exe), "" if unknown
}

// CIOSEnv reads BG_JOBID and BG_TOOLID, which jobctld gives the tools it starts; ok is false
// when neither is set (not a CIOS tool).
func CIOSEnv() (job uint64, tool uint32, ok bool, err error) {
	js, ts := os.Getenv("BG_JOBID"), os.Getenv("BG_TOOLID")
	if js == "" && ts == "" {
		return 0, 0, false, nil
	}
	job, err = strconv.ParseUint(js, 10, 64)
	if err != nil {
		return 0, 0, true, fmt.Errorf("agent: BG_JOBID %q: not a job id", js)
	}
	t, err := strconv.ParseUint(ts, 10, 32)
	if err != nil || t == 0 {
		return 0, 0, true, fmt.Errorf("agent: BG_TOOLID %q: not a tool id (1 or more)", ts)
	}
	return job, uint32(t), true, nil
}

// ReadCIOSJob reads job id's directory under jobsDir (on an I/O node, /jobs): its compute
// nodes' toolctld sockets, and which ranks each serves, by the real path of each
// toolctl_rank/<r> link against those of toolctl_node/<n> (the links of one compute node lead
// to one socket).
func ReadCIOSJob(jobsDir string, id uint64, tool uint32) (*CIOSJob, error) {
	dir := filepath.Join(jobsDir, strconv.FormatUint(id, 10))
	j := &CIOSJob{ID: id, ToolID: tool, Dir: dir, Nodes: map[uint32]string{}, Ranks: map[uint32]uint32{}}
	bySocket := map[string]uint32{}
	nodes, err := os.ReadDir(filepath.Join(dir, "toolctl_node"))
	if err != nil {
		return nil, fmt.Errorf("agent: job %d: compute nodes: %w", id, err)
	}
	for _, e := range nodes {
		n, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		p := filepath.Join(dir, "toolctl_node", e.Name())
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("agent: job %d: compute node %d: %w", id, n, err)
		}
		j.Nodes[uint32(n)] = p
		bySocket[real] = uint32(n)
	}
	if len(j.Nodes) == 0 {
		return nil, fmt.Errorf("agent: job %d: no compute node in %s", id, filepath.Join(dir, "toolctl_node"))
	}
	ranks, err := os.ReadDir(filepath.Join(dir, "toolctl_rank"))
	if err != nil {
		return nil, fmt.Errorf("agent: job %d: ranks: %w", id, err)
	}
	for _, e := range ranks {
		r, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(filepath.Join(dir, "toolctl_rank", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("agent: job %d: rank %d: %w", id, r, err)
		}
		n, ok := bySocket[real]
		if !ok {
			return nil, fmt.Errorf("agent: job %d: rank %d: its toolctld (%s) serves no compute node of the job", id, r, real)
		}
		j.Ranks[uint32(r)] = n
	}
	if len(j.Ranks) == 0 {
		return nil, fmt.Errorf("agent: job %d: no rank in %s", id, filepath.Join(dir, "toolctl_rank"))
	}
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		j.Exe = exe
	}
	return j, nil
}

// SortedRanks lists the job's ranks in order.
func (j *CIOSJob) SortedRanks() []uint32 {
	out := make([]uint32, 0, len(j.Ranks))
	for r := range j.Ranks {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

// StatusPath is the file whose modification time tells jobctld the tool is alive.
func (j *CIOSJob) StatusPath() string {
	return filepath.Join(j.Dir, "tools_status", strconv.FormatUint(uint64(j.ToolID), 10))
}

// CIOSHeartbeat is how often a CIOS tool touches its status file: jobctld takes a tool whose
// file has not changed for 60 s as gone.
const CIOSHeartbeat = 20 * time.Second

// heartbeat touches the job's status file every period until done is closed.
func (j *CIOSJob) heartbeat(period time.Duration, done <-chan struct{}, logf func(string, ...any)) {
	touch := func() {
		now := time.Now()
		if err := os.Chtimes(j.StatusPath(), now, now); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				err = os.WriteFile(j.StatusPath(), nil, 0o600)
			}
			if err != nil {
				logf("agent: job %d: tool %d: heartbeat: %v", j.ID, j.ToolID, err)
			}
		}
	}
	touch()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			touch()
		case <-done:
			return
		}
	}
}
