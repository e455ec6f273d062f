package debugger

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/symbols"
	"github.com/hpcdap/hpcdap/threaddb"
)

// rankSymbols is what the front end knows of one rank's process image at its current stop:
// the machine, the modules mapped into it (each a shared symbols.Binary at the rank's load
// bias), its memory through CDTI with a per-stop cache, and the stacks of its threads.
// Everything read from the process is dropped when the rank resumes (invalidate).
type rankSymbols struct {
	rank *Rank

	mu      sync.Mutex
	loaded  bool
	loadErr error
	arch    *symbols.Arch
	order   binary.ByteOrder
	exe     string
	mods    []*symbols.Module
	modsGen listGen // when mods were last read from the link map
	mem     *rankMemory
	stacks  map[int]*ThreadStack // by LWP, for the current stop
	tdb     *threaddb.Process
	tdbMods int    // len(mods) when tdb was opened
	lwps    []int  // the kernel's threads while threadLabels runs (nil: ask the agent)
	cnk     bool   // the agent is a BG/Q CNK: v6 commands only (bgq.go)
	rbrk    uint64 // r_debug.r_brk, where the dynamic linker reports library loads (0: static)
	libWait bool   // a trap at rbrk is planted (Job.updateLibraryWatch)
	rdebug  uint64 // the address of r_debug once the dynamic linker has set it up
	// lmNames remembers link-map entries already read, so that a walk after each dlopen reads
	// one word group per entry instead of also reading every library's name again. It is kept
	// only while library loads are watched: a library loaded unseen after another was
	// unloaded can get the unloaded one's entry, name pointer and bias back, and only a walk
	// between the two (at the unload's event) drops the old name.
	lmNames map[lmEntry]string

	held   map[int]bool // LWPs held by stop mode thread (guarded by the job's mutex)
	single []int        // LWPs held for a single-thread continue, released by the next full one (job's mutex)
}

// ThreadStack is one thread's registers and unwound stack at the current stop.
type ThreadStack struct {
	regs *symbols.Regs
	GP   []byte // native general register set
	FP   []byte // native floating-point set
	// BGQ holds the registers as a BG/Q CNK gave them (nil from an agent with the
	// extensions); GP and FP are then made from it.
	BGQ    *ppc64.BGQRegs
	Frames []*symbols.Frame
	proc   *symbols.Process
	err    error
}

// invalidate forgets what was read at the last stop.
func (rs *rankSymbols) invalidate() {
	rs.mu.Lock()
	rs.stacks = nil
	if rs.mem != nil {
		rs.mem.reset()
	}
	rs.mu.Unlock()
}

func (rs *rankSymbols) heldLWP(lwp int, held bool) {
	if rs.held == nil {
		rs.held = map[int]bool{}
	}
	if held {
		rs.held[lwp] = true
	} else {
		delete(rs.held, lwp)
	}
}

func (rs *rankSymbols) heldLWPs() []int {
	var out []int
	for l := range rs.held {
		out = append(out, l)
	}
	return out
}

// client returns the rank's CDTI connection.
func (rs *rankSymbols) client() *cdti.Client { return rs.rank.node.client }

func (rs *rankSymbols) num() uint32 { return uint32(rs.rank.Num) }

// ensure learns the rank's machine and modules; it runs once (at the first stop).
func (rs *rankSymbols) ensure(ctx context.Context) error {
	gen := rs.rank.listGenNow()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.loaded {
		return rs.loadErr
	}
	rs.loadErr = rs.loadLocked(ctx, gen)
	rs.loaded = true
	return rs.loadErr
}

// loadLocked learns what the rank's process is and its modules with one Query: GetTargetInfo,
// and the auxiliary vector and the link map as readModulesLocked asks for them. An agent that
// answers GetTargetInfo with CmdInval is a BG/Q CNK (loadFromELF).
func (rs *rankSymbols) loadLocked(ctx context.Context, gen listGen) error {
	r := rs.rank
	res, err := rs.client().Query(ctx, rs.num(), &cdti.GetTargetInfo{}, &cdti.GetAuxVectors{}, rs.linkMapCommand())
	if err == nil && res[0].Code == cdti.CmdInval {
		return rs.loadFromELF(ctx, gen)
	}
	if err == nil && res[0].Code != cdti.CmdSuccess {
		err = &cdti.CommandError{Type: cdti.TypeGetTargetInfo, Code: res[0].Code}
	}
	if err != nil {
		return fmt.Errorf("rank %d: target info: %w", r.Num, err)
	}
	ti, ok := res[0].Ack.(*cdti.GetTargetInfoAck)
	if !ok {
		return fmt.Errorf("rank %d: target info: answered with %T", r.Num, res[0].Ack)
	}
	r.node.ext.Store(true) // an hpcdap agent with the extensions: collectives may go to it
	rs.order = ti.Order()
	if rs.arch, err = symbols.ArchFor(ti.Machine, rs.order); err != nil {
		return fmt.Errorf("rank %d: %w", r.Num, err)
	}
	rs.exe = ti.Exe
	if rs.exe == "" {
		rs.exe = r.Exe
	}
	rs.mem = &rankMemory{rs: rs}
	return rs.takeModulesLocked(ctx, gen, res[1:], false)
}

// Arch returns the rank's machine (nil before ensure).
func (rs *rankSymbols) Arch() *symbols.Arch {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.arch
}

// setLibraryWatch records whether the link-map breakpoint is planted (Job.updateLibraryWatch).
// The remembered link-map names are forgotten when it goes: changes from then on are not seen.
func (rs *rankSymbols) setLibraryWatch(planted bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.libWait = planted
	if !planted {
		rs.lmNames = nil
	}
}

// modules returns the rank's modules, rereading the link map when asked to (a library may
// have been loaded since): once per stop, every time while the rank runs. A map the dynamic
// linker is changing is not taken: the last consistent list stays.
func (rs *rankSymbols) modules(ctx context.Context, refresh bool) ([]*symbols.Module, error) {
	if err := rs.ensure(ctx); err != nil {
		return nil, err
	}
	gen := rs.rank.listGenNow() // before rs.mu: the job's lock is taken first, never after
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if refresh && (rs.modsGen != gen || !gen.stopped) && rs.rank.node.client != nil {
		// A map being changed leaves the last consistent list, which is the answer.
		if err := rs.readModulesLocked(ctx, gen, true); err != nil && !errors.Is(err, errLinkMapChanging) {
			return rs.mods, err
		}
	}
	return rs.mods, nil
}

// listGen identifies when a module list was read: the rank's generation, and whether the
// rank was stopped then. A list read while the rank ran (a breakpoint set meanwhile) belongs
// to no stop: libraries may have come and gone before the rank stopped in that generation.
type listGen struct {
	gen     int
	stopped bool
}

// listGenNow reads the rank's generation and state.
func (r *Rank) listGenNow() listGen {
	r.job.mu.Lock()
	defer r.job.mu.Unlock()
	return listGen{gen: r.gen, stopped: r.state == RankStopped}
}

// readModulesLocked finds the executable's load bias from the auxiliary vector and the shared
// objects from the dynamic linker's link map (r_debug, through DT_DEBUG), all read from the
// process through CDTI. With an hpcdap agent, the link map comes in the same Query as the
// auxiliary vector: the agent walks it next to the process (GetLinkMap), finding the
// executable's dynamic section from its own auxiliary vector, so that the list costs one
// exchange whatever the bias the front end has yet to compute from the answer.
//
// With consistent, a link map the dynamic linker is changing (between the two r_brk calls
// that bracket every change) is not taken: the list stays as it was and the error is
// errLinkMapChanging. A rank's first list takes the map as it is.
func (rs *rankSymbols) readModulesLocked(ctx context.Context, gen listGen, consistent bool) error {
	cmds := []cdti.Command{&cdti.GetAuxVectors{}}
	if rs.rank.node.ext.Load() && !rs.cnk {
		cmds = append(cmds, rs.linkMapCommand())
	}
	res, err := rs.client().Query(ctx, rs.num(), cmds...)
	if err != nil {
		return fmt.Errorf("rank %d: read the auxiliary vector and the link map: %w", rs.rank.Num, err)
	}
	return rs.takeModulesLocked(ctx, gen, res, consistent)
}

// linkMapCommand asks an agent for the rank's link map (r_debug once known).
func (rs *rankSymbols) linkMapCommand() *cdti.GetLinkMap {
	return &cdti.GetLinkMap{MaxLength: cdti.MaxLinkMapSize, RDebug: rs.rdebug}
}

// takeModulesLocked makes the rank's module list from the answers to GetAuxVectors and, when
// res holds one, GetLinkMap; without a usable answer to the second, it walks the link map
// itself. consistent is readModulesLocked's.
func (rs *rankSymbols) takeModulesLocked(ctx context.Context, gen listGen, res []cdti.Result, consistent bool) error {
	r := rs.rank
	cache := r.job.syms
	bin, err := cache.Open(rs.exe)
	if err != nil {
		return fmt.Errorf("rank %d: read %s: %w", r.Num, rs.exe, err)
	}
	if len(res) == 0 || res[0].Code != cdti.CmdSuccess {
		return fmt.Errorf("rank %d: read the auxiliary vector: %v", r.Num, errOr(nil, res))
	}
	aux := procimage.Auxv{}
	if a, ok := res[0].Ack.(*cdti.GetAuxVectorsAck); ok {
		aux = procimage.AuxvFromWords(a.Words)
	}
	var bias uint64
	if e, ok := aux[procimage.AtEntry]; ok && bin.Type == elf.ET_DYN && !rs.arch.ELFv1() {
		bias = e - bin.Entry
	} else if ph, ok := aux[procimage.AtPhdr]; ok && bin.Type == elf.ET_DYN {
		if p, ok := bin.ProgHeader(elf.PT_PHDR); ok {
			bias = ph - p.Vaddr
		}
	}
	mods := []*symbols.Module{symbols.NewModule(bin, rs.exe, bias)}
	var libs []linkedObject
	answered := false
	if len(res) > 1 {
		libs, answered, err = rs.linkMapAnswer(res[1], consistent)
	}
	if !answered {
		libs, err = rs.linkMap(ctx, bin, bias, consistent)
	}
	if errors.Is(err, errLinkMapChanging) {
		return err
	}
	if err == nil {
		// Libraries are read in parallel (the first time: their DWARF, once per build-id).
		libMods := make([]*symbols.Module, len(libs))
		var wg sync.WaitGroup
		for i, l := range libs {
			if _, err := os.Stat(l.path); err != nil {
				continue // vdso or a file the front end cannot see
			}
			wg.Go(func() {
				if lb, err := cache.Open(l.path); err == nil {
					libMods[i] = symbols.NewModule(lb, l.path, l.bias)
				}
			})
		}
		wg.Wait()
		for _, m := range libMods {
			if m != nil {
				mods = append(mods, m)
			}
		}
	}
	rs.mods = mods
	rs.modsGen = gen
	if rs.mem != nil {
		rs.mem.setModules(mods)
	}
	return nil
}

// errOr describes a failed single-command exchange.
func errOr(err error, rs []cdti.Result) string {
	if err != nil {
		return err.Error()
	}
	if len(rs) > 0 {
		return rs[0].Code.String()
	}
	return "no result"
}

// stack returns a thread's registers and frames at the current stop, unwinding once.
func (rs *rankSymbols) stack(ctx context.Context, lwp int) (*ThreadStack, error) {
	if err := rs.ensure(ctx); err != nil {
		return nil, err
	}
	rs.mu.Lock()
	if ts := rs.stacks[lwp]; ts != nil {
		rs.mu.Unlock()
		return ts, ts.err
	}
	rs.mu.Unlock()
	ts := rs.unwind(ctx, lwp)
	// The unwind read what it needed: what else its pages held goes.
	rs.mem.trim()
	rs.mu.Lock()
	if rs.stacks == nil {
		rs.stacks = map[int]*ThreadStack{}
	}
	rs.stacks[lwp] = ts
	rs.mu.Unlock()
	return ts, ts.err
}

// executable is the path of the rank's executable, as far as it is known.
func (rs *rankSymbols) executable() string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.exe
}

// cachedStack returns the stack of a thread unwound at this stop, if there is one: no round
// trip.
func (rs *rankSymbols) cachedStack(lwp int) *ThreadStack {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if ts := rs.stacks[lwp]; ts != nil && ts.err == nil {
		return ts
	}
	return nil
}

// dropStack forgets the stack of a thread read at this stop (one written to, or run again
// alone), so that the next read unwinds it anew.
func (rs *rankSymbols) dropStack(lwp int) {
	rs.mu.Lock()
	delete(rs.stacks, lwp)
	rs.mu.Unlock()
}

func (rs *rankSymbols) unwind(ctx context.Context, lwp int) *ThreadStack {
	ts := &ThreadStack{}
	rs.mu.Lock()
	arch, cnk := rs.arch, rs.cnk
	rs.mu.Unlock()
	var gp, fp []byte
	var err error
	if cnk {
		if ts.BGQ, err = rs.bgqRegisters(ctx, lwp); err == nil {
			gp, fp = ts.BGQ.Native(arch.ByteOrder)
		}
	} else {
		gp, fp, err = rs.registers(ctx, lwp)
	}
	if err != nil {
		ts.err = err
		return ts
	}
	ts.GP, ts.FP = gp, fp
	if ts.regs, err = symbols.RegsFromNative(arch, gp, fp); err != nil {
		ts.err = fmt.Errorf("rank %d: LWP %d: registers: %w", rs.rank.Num, lwp, err)
		return ts
	}
	mods, _ := rs.modules(ctx, false)
	pc, _ := ts.regs.PC()
	if !inModules(mods, pc) {
		mods, _ = rs.modules(ctx, true) // a library loaded since the last look
	}
	ts.proc = rs.newProcess(mods, lwp)
	ts.Frames, ts.err = ts.proc.Stack(ts.regs, &symbols.StackOptions{MaxFrames: 512, HideInlineAtEntry: true})
	if !rs.listedThisStop() && !rs.framesInPlace(ctx, mods, ts.Frames) {
		// A frame in no known object, or in one whose code is no longer where the list places
		// it: libraries were loaded or unloaded since the link map was last read (see
		// modcheck.go). Read it again and unwind with what the process maps now.
		if fresh, _ := rs.modules(ctx, true); !slices.Equal(fresh, mods) {
			ts.proc = rs.newProcess(fresh, lwp)
			ts.Frames, ts.err = ts.proc.Stack(ts.regs, &symbols.StackOptions{MaxFrames: 512, HideInlineAtEntry: true})
		}
	}
	if ts.err != nil && len(ts.Frames) > 0 {
		ts.err = nil // a partial stack is still a stack
	}
	return ts
}

func inModules(mods []*symbols.Module, pc uint64) bool {
	for _, m := range mods {
		if m.Contains(pc) {
			return true
		}
	}
	return false
}

// newProcess describes the rank's process for symbol work on one thread: memory through
// CDTI, register writes to that thread, thread-local storage through threaddb.
func (rs *rankSymbols) newProcess(mods []*symbols.Module, lwp int) *symbols.Process {
	rs.mu.Lock()
	arch, mem := rs.arch, rs.mem
	rs.mu.Unlock()
	p := symbols.NewProcess(arch, mem, mods...)
	p.Regs = &regWriter{rs: rs, lwp: lwp}
	p.TLS = &tlsResolver{rs: rs}
	return p
}

// registers reads a thread's native general and floating-point register sets in one Query.
func (rs *rankSymbols) registers(ctx context.Context, lwp int) (gp, fp []byte, err error) {
	if rs.isCNK() {
		b, err := rs.bgqRegisters(ctx, lwp)
		if err != nil {
			return nil, nil, err
		}
		gp, fp = b.Native(rs.Arch().ByteOrder)
		return gp, fp, nil
	}
	res, err := rs.client().Query(ctx, rs.num(),
		&cdti.GetRegisterSet{ThreadID: uint32(lwp), Set: cdti.RegSetGeneral},
		&cdti.GetRegisterSet{ThreadID: uint32(lwp), Set: cdti.RegSetFloat, MaxLength: cdti.MaxRegisterSetSize})
	if err != nil {
		return nil, nil, fmt.Errorf("rank %d: LWP %d: read registers: %w", rs.rank.Num, lwp, err)
	}
	if res[0].Code != cdti.CmdSuccess {
		return nil, nil, fmt.Errorf("rank %d: LWP %d: read registers: %v", rs.rank.Num, lwp, res[0].Code)
	}
	gp = res[0].Ack.(*cdti.GetRegisterSetAck).Data
	if res[1].Code == cdti.CmdSuccess {
		fp = res[1].Ack.(*cdti.GetRegisterSetAck).Data
	}
	return gp, fp, nil
}

// regWriter writes frame-0 registers of one thread: read the native set, patch, write back.
type regWriter struct {
	rs  *rankSymbols
	lwp int
}

func (w *regWriter) WriteRegister(reg int, value []byte) error {
	ctx, cancel := context.WithTimeout(w.rs.rank.job.ctx, 10*time.Second)
	defer cancel()
	gp, fp, err := w.rs.registers(ctx, w.lwp)
	if err != nil {
		return err
	}
	w.rs.mu.Lock()
	arch := w.rs.arch
	w.rs.mu.Unlock()
	set, data, err := patchNative(arch, gp, fp, reg, value)
	if err != nil {
		return err
	}
	if err := w.rs.setNative(ctx, w.lwp, set, data); err != nil {
		return err
	}
	w.rs.mu.Lock()
	delete(w.rs.stacks, w.lwp)
	w.rs.mu.Unlock()
	return nil
}

// tlsResolver serves DW_OP_form_tls_address through threaddb.
type tlsResolver struct{ rs *rankSymbols }

func (t *tlsResolver) TLSAddress(regs *symbols.Regs, mod *symbols.Module, offset uint64) (uint64, error) {
	p, err := t.rs.threadDB()
	if err != nil {
		return 0, err
	}
	tp, ok := threadPointer(regs)
	if !ok {
		return 0, errors.New("thread pointer register unknown")
	}
	th, err := p.MapThreadPointer(tp)
	if err != nil {
		return 0, err
	}
	return p.TLSAddress(th, threaddb.Module{Path: mod.Path, Bias: mod.Bias}, offset)
}

// threadPointer returns the raw thread-pointer register from a frame's registers.
func threadPointer(regs *symbols.Regs) (uint64, bool) { return regs.Get(regs.Arch().TPReg) }

// threadDB opens threaddb over the rank's memory and modules (reopened when modules change).
func (rs *rankSymbols) threadDB() (*threaddb.Process, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mods, err := rs.modules(ctx, false)
	if err != nil {
		return nil, err
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.tdb != nil && rs.tdbMods == len(mods) {
		return rs.tdb, nil
	}
	var tm []threaddb.Module
	for _, m := range mods {
		tm = append(tm, threaddb.Module{Path: m.Path, Bias: m.Bias})
	}
	p, err := threaddb.Open(rs.rank.Pid, tm, rs.mem.transient(), &cdtiThreads{rs: rs})
	if err != nil {
		return nil, err
	}
	rs.tdb, rs.tdbMods = p, len(mods)
	return p, nil
}

// dropThreadDB forgets p if it is the rank's threaddb handle.
func (rs *rankSymbols) dropThreadDB(p *threaddb.Process) {
	rs.mu.Lock()
	if rs.tdb == p {
		rs.tdb = nil
	}
	rs.mu.Unlock()
}

// cdtiThreads lists LWPs and thread pointers through CDTI for threaddb.
type cdtiThreads struct{ rs *rankSymbols }

func (c *cdtiThreads) LWPs() ([]int, error) {
	c.rs.mu.Lock()
	lwps := c.rs.lwps
	c.rs.mu.Unlock()
	if lwps != nil {
		return slices.Clone(lwps), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.rs.client().ThreadList(ctx, c.rs.num())
	if err != nil {
		return nil, err
	}
	out := make([]int, len(list))
	for i, e := range list {
		out[i] = int(e.TID)
	}
	return out, nil
}

func (c *cdtiThreads) ThreadPointer(lwp int) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gp, fp, err := c.rs.registers(ctx, lwp)
	if err != nil {
		return 0, err
	}
	regs, err := symbols.RegsFromNative(c.rs.Arch(), gp, fp)
	if err != nil {
		return 0, err
	}
	tp, ok := threadPointer(regs)
	if !ok {
		return 0, errors.New("no thread pointer")
	}
	return tp, nil
}

// Stack returns the stack of the rank's thread lwp at this stop (read once per stop).
func (r *Rank) Stack(ctx context.Context, lwp int) (*ThreadStack, error) {
	return r.sym.stack(ctx, lwp)
}

// Modules returns the rank's modules as last read from its link map.
func (r *Rank) Modules(ctx context.Context) ([]*symbols.Module, error) {
	return r.sym.modules(ctx, false)
}
