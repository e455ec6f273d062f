package debugger

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
)

// coreJob is the back end of a post-mortem job: a core file of the program instead of live
// ranks. It is shown as rank 0, stopped for the signal that killed it; everything that reads
// (stacks, scopes, variables, evaluation, memory, disassembly, parallel stacks) works as for a
// live rank, everything that would change the process is refused with errPostMortem.
type coreJob struct {
	j    *Job
	core *symbols.Core
	rank *Rank
}

// OpenCoreJob opens core file coreFile of program.
func OpenCoreJob(cfg Config, coreFile, program string) (*Job, error) {
	c, err := symbols.OpenCore(coreFile, &symbols.CoreOptions{Executable: program, Cache: cfg.Syms})
	if err != nil {
		return nil, fmt.Errorf("core file %s: %w", coreFile, err)
	}
	if len(c.Threads) == 0 {
		c.Close()
		return nil, fmt.Errorf("core file %s holds no thread", coreFile)
	}
	j := &Job{ev: cfg.Events, ctx: cfg.Ctx, callTimeout: cfg.CallTimeout, size: 1, mode: StopAll, byNum: map[int]*Rank{},
		threads: map[int]*Thread{}, syms: cfg.Syms, changed: map[*Rank]bool{}}
	j.bps = newBreakpoints(j)
	j.focus = rankset.Of(0)
	leader := c.Threads[0]
	n := &node{host: "core", ep: &launch.AgentEndpoint{}}
	r := &Rank{job: j, Num: 0, node: n, Pid: leader.Pid, leader: leader.Pid, Exe: program, state: RankStopped,
		hits: map[int]int{}, started: make(chan struct{})}
	r.sym.rank = r
	r.sym.loaded = true
	r.sym.arch = c.Arch
	r.sym.order = c.Arch.ByteOrder
	r.sym.exe = program
	r.sym.mods = c.Process.Modules()
	r.sym.stacks = map[int]*ThreadStack{}
	n.ranks = []*Rank{r}
	j.nodes = nil
	j.ranks = []*Rank{r}
	j.byNum[0] = r
	for _, ct := range c.Threads {
		j.addThread(r, ct.Pid)
		frames, err := c.Process.Stack(ct.Regs, &symbols.StackOptions{MaxFrames: 512})
		if err != nil && len(frames) > 0 {
			err = nil
		}
		r.sym.stacks[ct.Pid] = &ThreadStack{regs: ct.Regs, Frames: frames, proc: c.Process, err: err}
	}
	r.threadsGen = r.gen
	sig := leader.Signal
	r.notif = &cdti.NotifySignal{Signal: uint32(sig), ThreadID: uint32(leader.Pid)}
	if pc, ok := leader.Regs.PC(); ok {
		r.notif.InstAddress = pc
	}
	r.stopReason = "exception"
	if sig == 0 {
		r.stopReason = "entry"
	}
	j.back = &coreJob{j: j, core: c, rank: r}
	return j, nil
}

// reportStop sends the stop of the dead process: the signal that killed it.
func (c *coreJob) reportStop() {
	r := c.rank
	t := c.j.threadFor(r, int(r.notif.ThreadID))
	sig := int(r.notif.Signal)
	info := stopInfo{reason: r.stopReason, tid: t.LWP}
	if sig != 0 {
		info.text = fmt.Sprintf("%s (%s) on rank 0 (core file %s)", SignalName(sig), SignalDescription(sig),
			filepath.Base(c.core.Path))
	}
	c.j.sendStopped(t, info, true)
}

func (c *coreJob) frozen() error { return errPostMortem }

func (c *coreJob) end(bool) { c.core.Close() }

// binaries returns the binaries mapped in the core.
func (c *coreJob) binaries(context.Context) []*symbols.Binary {
	var out []*symbols.Binary
	for _, m := range c.core.Process.Modules() {
		out = append(out, m.Bin)
	}
	return out
}

func (c *coreJob) viewModules(context.Context) ([]*symbols.Module, error) {
	return c.core.Process.Modules(), nil
}

func (c *coreJob) viewProcess(context.Context) (*symbols.Process, error) { return c.core.Process, nil }

func (c *coreJob) readMemory(_ context.Context, addr uint64, count int) ([]byte, error) {
	data := make([]byte, count)
	n, _ := c.core.ReadAt(data, addr)
	return data[:n], nil
}

// traceback refuses: no agent walks a core's stacks, each thread is unwound exactly.
func (c *coreJob) traceback(context.Context, *Rank, int) ([]cdti.TraceFrame, error) {
	return nil, errPostMortem
}

// ReportPostMortemStop reports the stop a core file's rank is in (the entry stop of a
// post-mortem session); a live job reports nothing.
func (j *Job) ReportPostMortemStop() {
	if c, ok := j.back.(*coreJob); ok {
		c.reportStop()
	}
}
