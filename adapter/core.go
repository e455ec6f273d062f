package adapter

import (
	"fmt"
	"path/filepath"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
)

// coreJob is a post-mortem job: a core file of the program instead of live ranks. It is shown
// as rank 0, stopped for the signal that killed it; everything that reads (stacks, scopes,
// variables, evaluation, memory, disassembly, parallel stacks) works as for a live rank,
// everything that would change the process is refused.
type coreJob struct {
	j    *Job
	core *symbols.Core
	rank *Rank
}

// openCoreJob opens plan.coreFile for plan.program.
func openCoreJob(s *Session, plan *launchPlan) (*Job, error) {
	c, err := symbols.OpenCore(plan.coreFile, &symbols.CoreOptions{Executable: plan.program, Cache: s.srv.symbolCache()})
	if err != nil {
		return nil, fmt.Errorf("core file %s: %w", plan.coreFile, err)
	}
	if len(c.Threads) == 0 {
		c.Close()
		return nil, fmt.Errorf("core file %s holds no thread", plan.coreFile)
	}
	j := &Job{s: s, ctx: s.ctx, size: 1, mode: stopAll, byNum: map[int]*Rank{}, threads: map[int]*Thread{},
		syms: s.srv.symbolCache(), changed: map[*Rank]bool{}}
	j.bps = newBreakpoints(j)
	j.handles.init()
	j.focus = rankset.Of(0)
	leader := c.Threads[0]
	n := &node{host: "core", ep: &NodeEndpoint{}}
	r := &Rank{job: j, Num: 0, node: n, Pid: leader.Pid, Exe: plan.program, state: rankStopped,
		hits: map[int]int{}, started: make(chan struct{})}
	r.sym.rank = r
	r.sym.loaded = true
	r.sym.arch = c.Arch
	r.sym.order = c.Arch.ByteOrder
	r.sym.exe = plan.program
	r.sym.mods = c.Process.Modules()
	r.sym.stacks = map[int]*threadStack{}
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
		r.sym.stacks[ct.Pid] = &threadStack{regs: ct.Regs, frames: frames, proc: c.Process, err: err}
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
	cj := &coreJob{j: j, core: c, rank: r}
	j.core = cj
	return j, nil
}

// reportStop sends the stop of the dead process: the signal that killed it.
func (c *coreJob) reportStop() {
	r := c.rank
	t := c.j.threadFor(r, int(r.notif.ThreadID))
	sig := int(r.notif.Signal)
	info := stopInfo{reason: r.stopReason, tid: t.LWP}
	if sig != 0 {
		info.text = fmt.Sprintf("%s (%s) on rank 0 (core file %s)", signalName(sig), signalDescription(sig),
			filepath.Base(c.core.Path))
	}
	c.j.sendStopped(t, info, true)
}

func (c *coreJob) close() { c.core.Close() }

// binaries returns the binaries mapped in the core.
func (c *coreJob) binaries() []*symbols.Binary {
	var out []*symbols.Binary
	for _, m := range c.core.Process.Modules() {
		out = append(out, m.Bin)
	}
	return out
}
