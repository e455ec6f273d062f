package agent

import (
	"debug/elf"
	"encoding/binary"
	"strings"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// resolve applies the CNK's thread selection: threadID 0 is the thread last notified to this
// tool if it still exists, else the process leader; any other id must be a thread of the
// process.
func (p *proc) resolve(t *tool, id uint32) *pthread {
	if id == 0 {
		if th := p.threads[t.defaultTid]; th != nil && t.defaultTid != 0 {
			return th
		}
		if th := p.threads[p.leader]; th != nil {
			return th
		}
		if tids := p.sortedTids(); len(tids) > 0 {
			return p.threads[tids[0]]
		}
		return nil
	}
	return p.threads[int(id)]
}

// fail is a failed command's result: the 8-byte ack with the thread id used.
func fail(code cdti.CmdReturnCode, tid uint32) cdti.Result {
	return cdti.Result{Code: code, Ack: &cdti.BareAck{ThreadID: tid}}
}

func ok(a cdti.Ack) cdti.Result { return cdti.Result{Code: cdti.CmdSuccess, Ack: a} }

// query runs the commands of a Query for tool t.
func (p *proc) query(t *tool, cmds []cdti.Command) []cdti.Result {
	rs := make([]cdti.Result, len(cmds))
	for i, c := range cmds {
		if p.exited {
			rs[i] = fail(cdti.CmdProcessExiting, c.Thread())
			continue
		}
		if raw, isRaw := c.(*cdti.RawCommand); isRaw {
			rs[i] = fail(cdti.CmdInval, raw.ThreadID) // the framework answers these itself
			continue
		}
		th := p.resolve(t, c.Thread())
		if _, eval := c.(*cdti.EvaluateValue); eval && c.Thread() == 0 {
			th = p.threads[p.leader] // the thread GatherStacks walks
		}
		if th == nil {
			rs[i] = fail(cdti.CmdTIDinval, c.Thread())
			continue
		}
		rs[i] = p.queryOne(th, c)
	}
	return rs
}

func (p *proc) queryOne(th *pthread, c cdti.Command) cdti.Result {
	tid := uint32(th.tid)
	switch c := c.(type) {
	case *cdti.GetMemory:
		return p.getMemory(tid, c)
	case *cdti.GetModuleMemory:
		return p.getModuleMemory(tid, c)
	case *cdti.GetThreadList:
		return ok(&cdti.GetThreadListAck{ThreadID: tid, Threads: p.threadEntries()})
	case *cdti.ListThreads:
		return ok(&cdti.ListThreadsAck{ThreadID: tid, Threads: p.threadEntries()})
	case *cdti.GetAuxVectors:
		return ok(&cdti.GetAuxVectorsAck{ThreadID: tid, Words: auxForCDTI(p.auxWords())})
	case *cdti.GetProcessData:
		return p.getProcessData(tid)
	case *cdti.GetThreadData:
		return p.getThreadData(th)
	case *cdti.GetPreferences:
		return ok(&cdti.GetPreferencesAck{ThreadID: tid, BreakpointMode: p.prefs.breakMode,
			WatchpointMode: p.prefs.watchMode, DACMode: p.prefs.dacMode})
	case *cdti.GetFilenames:
		return ok(&cdti.GetFilenamesAck{ThreadID: tid, Names: p.a.stagingFiles()})
	case *cdti.GetFileStatData:
		st, code := p.a.fileStat(c.Pathname)
		if code != cdti.CmdSuccess {
			return fail(code, tid)
		}
		return ok(&cdti.GetFileStatDataAck{ThreadID: tid, Stat: st})
	case *cdti.GetFileContents:
		data, code := p.a.fileContents(c.Pathname, c.Offset, c.NumBytes)
		if code != cdti.CmdSuccess {
			return fail(code, tid)
		}
		return ok(&cdti.GetFileContentsAck{ThreadID: tid, Data: data})
	case *cdti.GetTargetInfo:
		order := elf.ELFDATA2MSB
		if p.info.ByteOrder == binary.LittleEndian {
			order = elf.ELFDATA2LSB
		}
		return ok(&cdti.GetTargetInfoAck{ThreadID: tid, Machine: p.info.Machine, ByteOrder: order,
			PtrSize: uint8(p.info.PtrSize), PageSize: uint32(p.info.PageSize), Pid: uint32(p.pid), Exe: p.info.Exe})
	case *cdti.GetRegisterSet:
		return p.getRegisterSet(th, c)
	case *cdti.GetTraceback:
		return p.getTraceback(th, c)
	case *cdti.EvaluateValue:
		return p.evaluateValue(th, c)
	case *cdti.GetLinkMap:
		return p.getLinkMap(tid, c)
	}
	if r, handled := p.powerQuery(th, c); handled {
		return r
	}
	// GetGeneralRegs, GetSpecialRegs, GetFloatRegs, GetDebugRegs: Power registers, which this
	// target does not have (GetRegisterSet reads its own).
	return fail(cdti.CmdInval, tid)
}

func (p *proc) getMemory(tid uint32, c *cdti.GetMemory) cdti.Result {
	if c.Length > cdti.MaxMemorySize {
		return cdti.Result{Code: cdti.CmdLngthErr, Ack: &cdti.GetMemoryAck{ThreadID: tid, Addr: c.Addr, Length: c.Length}}
	}
	buf := make([]byte, c.Length)
	if c.Length > 0 {
		if n, err := p.tp.ReadMemory(c.Addr, buf); err != nil || n != len(buf) {
			return cdti.Result{Code: cdti.CmdParmErr, Ack: &cdti.GetMemoryAck{ThreadID: tid, Addr: c.Addr, Length: c.Length}}
		}
		if !p.a.cnk {
			// A CNK shows its process's own traps (and keeps no copy of what they replaced,
			// cdti-v6.md §8.8); the agent otherwise shows the original instructions.
			p.shadowRead(c.Addr, buf)
		}
	}
	return ok(&cdti.GetMemoryAck{ThreadID: tid, Addr: c.Addr, Length: c.Length, Data: buf})
}

// threadEntries lists the process's threads for GetThreadList and ListThreads.
func (p *proc) threadEntries() []cdti.ThreadEntry {
	var out []cdti.ThreadEntry
	for _, x := range p.sortedTids() {
		out = append(out, cdti.ThreadEntry{TID: uint32(x)})
	}
	return out
}

// getModuleMemory reads as getMemory does, at an address relative to a module's load bias.
func (p *proc) getModuleMemory(tid uint32, c *cdti.GetModuleMemory) cdti.Result {
	biases, err := p.moduleBiases()
	bias, loaded := biases[c.Module]
	if err != nil || !loaded {
		return fail(cdti.CmdParmErr, tid)
	}
	r := p.getMemory(tid, &cdti.GetMemory{ThreadID: tid, Addr: bias + c.Offset, Length: c.Length, SpecAccess: c.SpecAccess})
	a, read := r.Ack.(*cdti.GetMemoryAck)
	if r.Code != cdti.CmdSuccess || !read {
		return fail(r.Code, tid)
	}
	return ok(&cdti.GetModuleMemoryAck{ThreadID: tid, Addr: a.Addr, Length: a.Length, Data: a.Data})
}

// auxForCDTI fits the auxiliary vector into GetAuxVectorsAck: type/value pairs up to and
// including AT_NULL; a longer vector (Linux gives about 20 pairs, the ack holds 16) keeps its
// first 15 pairs and ends with AT_NULL.
func auxForCDTI(words []uint64) []uint64 {
	var out []uint64
	for i := 0; i+1 < len(words); i += 2 {
		if words[i] == 0 {
			break
		}
		if len(out)+2 >= cdti.MaxAuxVecDWords {
			break
		}
		out = append(out, words[i], words[i+1])
	}
	return append(out, 0, 0)
}

func (p *proc) getProcessData(tid uint32) cdti.Result {
	a := &cdti.GetProcessDataAck{ThreadID: tid, Rank: p.rank, TGID: uint32(p.pid)}
	if ms, err := readMaps(p.pid); err == nil {
		l := layoutOf(ms, p.info.Exe)
		a.HeapStart, a.HeapEnd, a.HeapBreak = l.heapStart, l.heapEnd, l.heapBreak
		a.MmapStart, a.MmapEnd = l.mmapStart, l.mmapEnd
	}
	if age, err := processAge(p.pid); err == nil {
		a.JobTime = cdti.Timeval{Sec: int64(age.Seconds()), Usec: age.Microseconds() % 1e6}
	}
	return ok(a)
}

// getThreadData answers GetThreadData. A running thread is stopped for the moment it takes to
// read its registers and walk its stack.
func (p *proc) getThreadData(th *pthread) cdti.Result {
	tid := uint32(th.tid)
	a := &cdti.GetThreadDataAck{ThreadID: tid, SpecState: cdti.SpecNonSpeculative}
	a.ToolState = p.toolState(th)
	st, err := readTaskStat(p.pid, th.tid)
	if err == nil {
		a.Core = int32(st.processor)
	}
	a.State = cdti.ThreadRun
	if err == nil && (st.state == 'S' || st.state == 'D') {
		a.State = cdti.ThreadSleep
		if strings.Contains(wchan(p.pid, th.tid), "futex") {
			a.State = cdti.ThreadFutexWait
		}
	}
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
		if err != nil || p.mach == nil {
			return cdti.CmdSuccess // state without a stack
		}
		if err == nil && a.State == cdti.ThreadRun {
			a.State = p.mach.syscallState(regs)
		}
		sp := p.mach.sp(regs)
		a.StackCurrent = sp
		lo, hi := uint64(0), uint64(0)
		if ms, err := readMaps(p.pid); err == nil {
			if m, i, found := findMapping(ms, sp); found {
				lo, hi = m.start, m.end
				a.StackStart = m.end
				if i > 0 && ms[i-1].end == m.start && ms[i-1].perms == "---p" {
					a.GuardStart, a.GuardEnd = ms[i-1].start, ms[i-1].end-1
				}
			}
		}
		frames := p.mach.traceback(programMemory{p}, regs, cdti.MaxStackFrames+1, lo, hi)
		a.Frames = stackInfo(frames)
		return cdti.CmdSuccess
	})
	if code != cdti.CmdSuccess {
		return fail(code, tid)
	}
	a.ToolState = p.toolState(th)
	return ok(a)
}

// toolState is BG_Thread_ToolState: whether a tool holds the thread and whether the process
// is suspended (stopped for a notification, or loaded but not started).
func (p *proc) toolState(th *pthread) cdti.ToolState {
	susp := p.suspended || !p.started
	switch {
	case th.held && susp:
		return cdti.ToolHoldSuspend
	case th.held:
		return cdti.ToolHold
	case susp:
		return cdti.ToolSuspend
	}
	return cdti.ToolActive
}

func regSet(s cdti.RegisterSet) (target.RegSet, bool) {
	switch s {
	case cdti.RegSetGeneral:
		return target.RegsGeneral, true
	case cdti.RegSetFloat:
		return target.RegsFloat, true
	}
	return 0, false
}

func (p *proc) getRegisterSet(th *pthread, c *cdti.GetRegisterSet) cdti.Result {
	tid := uint32(th.tid)
	set, valid := regSet(c.Set)
	if !valid {
		return fail(cdti.CmdParmErr, tid)
	}
	var data []byte
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		var err error
		if data, err = p.tp.Registers(th.tid, set); err != nil {
			return cdti.CmdTIDinval
		}
		if uint32(len(data)) > c.Limit() {
			return cdti.CmdLngthErr
		}
		return cdti.CmdSuccess
	})
	if code != cdti.CmdSuccess {
		return fail(code, tid)
	}
	return ok(&cdti.GetRegisterSetAck{ThreadID: tid, Set: c.Set, Data: data})
}

func (p *proc) getTraceback(th *pthread, c *cdti.GetTraceback) cdti.Result {
	tid := uint32(th.tid)
	if p.mach == nil && p.isPower() {
		return p.getPowerTraceback(th, c)
	}
	if p.mach == nil {
		return fail(cdti.CmdInval, tid)
	}
	var frames []cdti.TraceFrame
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
		if err != nil {
			return cdti.CmdTIDinval
		}
		lo, hi := uint64(0), uint64(0)
		if ms, err := readMaps(p.pid); err == nil {
			if m, _, found := findMapping(ms, p.mach.sp(regs)); found {
				lo, hi = m.start, m.end
			}
		}
		frames = p.mach.traceback(programMemory{p}, regs, int(c.Limit()), lo, hi)
		return cdti.CmdSuccess
	})
	if code != cdti.CmdSuccess {
		return fail(code, tid)
	}
	return ok(&cdti.GetTracebackAck{ThreadID: tid, Frames: frames})
}
