package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch/mpir"
)

// A second tool of a BG/Q job. The first tool to attach to a running runjob reaches its MPIR
// interface by tracing it, which a process allows one tracer at a time: a further tool of the
// same job (up to the four a compute node takes) is started as BG/Q starts any tool of a
// running job, by start_tool (runjob's tool start, cdti-v6.md §2.1): jobctld gives it the
// next tool id on each I/O node of the job. The front end reads runjob's proc table without
// tracing it (mpir.ReadRunningTable) to know which I/O node's agent serves which ranks.

// bgqStartToolCommand is the start_tool that reaches runjob pid: BG/Q's on PATH, or for the
// emulated runjob the emulator's (hpcdap bgq start_tool, the agent's binary). Both find the
// job by runjob's pid. start_tool splits the tool's arguments at white space, so none may
// hold any.
func bgqStartToolCommand(fe *Frontend, emulated bool, pid int, t *bgqTool) ([]string, error) {
	for _, a := range t.daemons.Args {
		if a == "" || strings.ContainsAny(a, " \t\n") {
			return nil, fmt.Errorf("launch: start_tool: tool argument %q: start_tool's --args splits at white space", a)
		}
	}
	args := []string{"--pid", strconv.Itoa(pid), "--tool", t.daemons.Path, "--args", strings.Join(t.daemons.Args, " ")}
	if emulated {
		return append([]string{fe.opts.AgentPath, "bgq", "start_tool"}, args...), nil
	}
	return append([]string{"start_tool"}, args...), nil
}

// attachByStartTool attaches to the job of runjob pid (exe) as a further tool: its agents
// started by start_tool, the ranks from runjob's proc table.
func attachByStartTool(ctx context.Context, fe *Frontend, pid, tracer int, exe string, emulated bool) (Job, error) {
	id := fmt.Sprintf("%s pid %d", filepath.Base(exe), pid)
	fe.progressf("launch: %s: its MPIR interface is held by another tool (pid %d traces it): starting this session's tool with start_tool", id, tracer)
	procs, err := mpir.ReadRunningTable(ctx, pid, exe)
	if err != nil {
		return nil, fmt.Errorf("launch: attach to %s as a further tool: %w", id, err)
	}
	tool, err := newBGQTool(fe, emulated, "")
	if err != nil {
		return nil, err
	}
	defer tool.rv.close()
	j := &bgqToolJob{id: id, pid: pid, tokenFile: tool.tokenFile}
	for _, p := range procs {
		j.procs = append(j.procs, Proc{Rank: p.Rank, Host: p.Host, Pid: p.Pid, Executable: p.Executable})
	}
	j.jobNodes = jobNodes{bgqNodes{procs: j.procs}}
	argv, err := bgqStartToolCommand(fe, emulated, pid, tool)
	if err != nil {
		j.Close()
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, fe.opts.Timeout)
	out, err := exec.CommandContext(cctx, argv[0], argv[1:]...).CombinedOutput()
	cancel()
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("launch: %s: start_tool: %v: %s", id, err, bytes.TrimSpace(out))
	}
	fe.progressf("launch: %s: %s", id, bytes.TrimSpace(out))
	if j.agents, err = waitCIOSAgents(ctx, fe, tool.rv, id, j.procs, tool.token, "", ""); err != nil {
		j.Close()
		// The tool start_tool started holds one of the job's tool slots: end it.
		if e := endStartedTool(ctx, fe, emulated, pid, out); e != nil {
			err = fmt.Errorf("%w (and %v)", err, e)
		}
		return nil, err
	}
	return j, nil
}

// startedTool matches the tool id in start_tool's report ("tool 3 started for job 17").
var startedTool = regexp.MustCompile(`(?i)\btool\s+(\d+)`)

// endStartedTool ends, with end_tool, the tool of runjob pid that start_tool reported
// starting in out.
func endStartedTool(ctx context.Context, fe *Frontend, emulated bool, pid int, out []byte) error {
	m := startedTool.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("launch: end_tool: no tool id in start_tool's report %q", bytes.TrimSpace(out))
	}
	args := []string{"--pid", strconv.Itoa(pid), "--tool", string(m[1])}
	argv := append([]string{"end_tool"}, args...)
	if emulated {
		argv = append([]string{fe.opts.AgentPath, "bgq", "end_tool"}, args...)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fe.opts.Timeout)
	defer cancel()
	if b, err := exec.CommandContext(cctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("launch: end_tool %s of runjob pid %d: %v: %s", m[1], pid, err, bytes.TrimSpace(b))
	}
	return nil
}

// bgqToolJob is a running BG/Q job this session reaches through a tool start_tool started:
// it holds nothing of runjob, which another tool traces.
type bgqToolJob struct {
	id        string
	pid       int
	procs     []Proc
	tokenFile string
	agents    []AgentEndpoint
	jobNodes
}

// The Job methods of a job reached through start_tool: nothing holds its ranks, and runjob is
// another tool's to release.

func (j *bgqToolJob) ID() string                    { return j.id }
func (j *bgqToolJob) Procs() []Proc                 { return append([]Proc(nil), j.procs...) }
func (j *bgqToolJob) Hold() Hold                    { return HoldNone }
func (j *bgqToolJob) Release(context.Context) error { return nil }
func (j *bgqToolJob) LauncherPid() int              { return j.pid }
func (j *bgqToolJob) nodeAgents() []AgentEndpoint   { return j.agents }
func (j *bgqToolJob) Close() error                  { os.Remove(j.tokenFile); return nil }
func (j *bgqToolJob) exited() bool                  { return processEnded(j.pid) }

// Kill ends runjob with sig, which ends the job with it.
func (j *bgqToolJob) Kill(_ context.Context, sig syscall.Signal) error {
	if err := syscall.Kill(j.pid, sig); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("launch: kill %s: %w", j.id, err)
	}
	return nil
}

// Wait waits for runjob to end. Its status is its parent's to read: an ended runjob reports 0.
func (j *bgqToolJob) Wait(ctx context.Context) (cdti.ExitStatus, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !j.exited() {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("launch: wait for %s: %w", j.id, ctx.Err())
		case <-t.C:
		}
	}
	return 0, nil
}
