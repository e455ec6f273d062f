package stacks

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/hpcdap/hpcdap/launch"
)

// Target is what to sample: exactly one of its fields is set.
type Target struct {
	LauncherPid int         // a running mpirun, mpiexec.hydra or srun of this host
	SlurmJob    string      // a Slurm job step "J.S"
	Pids        map[int]int // rank → pid of processes of this host
	Command     []string    // a launcher command line to run, then sample
}

// Check reports a target that names nothing, more than one thing, or a process that is not
// there.
func (t Target) Check() error {
	n := 0
	for _, set := range []bool{t.LauncherPid != 0, t.SlurmJob != "", len(t.Pids) > 0, len(t.Command) > 0} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return errors.New("no target: give --pid, --slurm, --pids or a command after --")
	case n > 1:
		return errors.New("give only one target: --pid, --slurm, --pids or a command after --")
	}
	if t.LauncherPid != 0 {
		if t.LauncherPid < 0 {
			return fmt.Errorf("--pid %d is not a process id", t.LauncherPid)
		}
		if !launch.ProcessExists(t.LauncherPid) {
			return fmt.Errorf("--pid %d: no such process on this host", t.LauncherPid)
		}
	}
	if t.SlurmJob != "" {
		if _, err := ParseSlurmStep(t.SlurmJob); err != nil {
			return err
		}
	}
	for _, r := range sortedRanks(t.Pids) {
		if !launch.ProcessExists(t.Pids[r]) {
			return fmt.Errorf("--pids: rank %d: pid %d: no such process on this host", r, t.Pids[r])
		}
	}
	return nil
}

func sortedRanks(pids map[int]int) []int {
	rs := make([]int, 0, len(pids))
	for r := range pids {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	return rs
}

// ParseSlurmStep checks a Slurm job step "JOBID.STEPID" and returns it.
func ParseSlurmStep(s string) (string, error) {
	if !launch.IsSlurmStep(s) {
		return "", fmt.Errorf("--slurm %q: want a job step JOBID.STEPID such as 1234.0 (squeue --steps lists them)", s)
	}
	return s, nil
}

// ParsePids reads a --pids list: "RANK=PID,..." pairs, or plain "PID,..." numbered as ranks
// 0, 1, ... in order. The two forms do not mix.
func ParsePids(s string) (map[int]int, error) {
	pids := map[int]int{}
	rankOf := map[int]int{}
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--pids names no process")
	}
	pairs := strings.Contains(s, "=")
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		rank, pidText := i, item
		if pairs {
			rt, pt, ok := strings.Cut(item, "=")
			if !ok {
				return nil, fmt.Errorf("--pids: %q: give every entry as RANK=PID, or none", item)
			}
			r, err := strconv.Atoi(strings.TrimSpace(rt))
			if err != nil || r < 0 {
				return nil, fmt.Errorf("--pids: %q: %q is not a rank", item, rt)
			}
			rank, pidText = r, strings.TrimSpace(pt)
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("--pids: %q is not a process id", pidText)
		}
		if _, dup := pids[rank]; dup {
			return nil, fmt.Errorf("--pids: rank %d given twice", rank)
		}
		if o, dup := rankOf[pid]; dup {
			return nil, fmt.Errorf("--pids: pid %d given for ranks %d and %d", pid, o, rank)
		}
		pids[rank], rankOf[pid] = pid, rank
	}
	return pids, nil
}
