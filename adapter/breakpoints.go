package adapter

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
)

// bpKind is the kind of a user breakpoint.
type bpKind int

const (
	bpSource bpKind = iota
	bpFunction
	bpInstruction
	bpData
	bpEntry // the internal breakpoint on main for stopAtEntry
)

// userBP is one breakpoint the client set. It is resolved once per distinct binary (link-time
// locations), then planted on every rank of its rank set at that rank's load bias.
type userBP struct {
	id    int
	kind  bpKind
	ranks rankset.Set // the focus when it was set

	path         string // bpSource: the file as the client names it
	file         string // bpSource: the file as the debug information names it
	line, column int
	fn           string          // bpFunction
	instrBin     *symbols.Binary // bpInstruction: binary, link-time address, and the address as given
	instrAddr    uint64
	instrRef     uint64
	data         *dataTarget // bpData

	cond, hitCond, logMsg string

	locs     map[*symbols.Binary][]symbols.Location // resolution per binary
	resolved bool
	message  string
	actual   symbols.Location // where it really stops, for the response
	planted  int              // ranks it is planted on
	failures map[int]string   // rank → why planting failed
}

// site is one trapped address of one rank.
type site struct {
	orig []byte
	user bool // a user breakpoint wants it
	temp int  // steps that want it
}

// breakpoints holds the session's breakpoints and what is planted where.
type breakpoints struct {
	j *Job

	mu      sync.Mutex
	next    int
	source  map[string][]*userBP
	funcs   []*userBP
	instrs  []*userBP
	data    []*dataTarget
	entry   *userBP
	sites   map[*Rank]map[uint64]*site
	watches map[*Rank]map[uint64]*dataTarget
	passed  map[*Rank]bool // ranks past the stopAtEntry breakpoint
}

func newBreakpoints(j *Job) *breakpoints {
	return &breakpoints{j: j, next: 0, source: map[string][]*userBP{}, sites: map[*Rank]map[uint64]*site{},
		watches: map[*Rank]map[uint64]*dataTarget{}, passed: map[*Rank]bool{}}
}

func (b *breakpoints) newID() int {
	b.next++
	return b.next
}

// binaries returns every distinct binary mapped in the job's live ranks.
func (j *Job) binaries(ctx context.Context) []*symbols.Binary {
	seen := map[*symbols.Binary]bool{}
	var out []*symbols.Binary
	for _, r := range j.liveRanks() {
		mods, err := r.sym.modules(ctx, false)
		if err != nil {
			continue
		}
		for _, m := range mods {
			if !seen[m.Bin] {
				seen[m.Bin] = true
				out = append(out, m.Bin)
			}
		}
	}
	return out
}

// liveRanks returns the ranks that have started and not exited.
func (j *Job) liveRanks() []*Rank {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*Rank
	for _, r := range j.ranks {
		if r.state == rankRunning || r.state == rankStopped {
			out = append(out, r)
		}
	}
	return out
}

// resolve computes a breakpoint's link-time locations in each binary.
func (b *breakpoints) resolve(bp *userBP, bins []*symbols.Binary) {
	bp.locs = map[*symbols.Binary][]symbols.Location{}
	bp.resolved = false
	bp.message = ""
	var lastErr error
	for i, bin := range bins {
		if (bp.kind == bpFunction || bp.kind == bpEntry) && bp.resolved && i > 0 {
			// Found in the program: its libraries are not searched (they are large, and a
			// program's own function is what a user names).
			break
		}
		var locs []symbols.Location
		var err error
		switch bp.kind {
		case bpSource:
			locs, err = bin.LineBreakpoints(bp.file, bp.line)
		case bpFunction, bpEntry:
			locs, err = bin.FunctionBreakpoints(bp.fn)
		case bpInstruction:
			if bin == bp.instrBin {
				locs = []symbols.Location{{Addr: bp.instrAddr}}
				if l, ok := bin.LineForPC(bp.instrAddr); ok {
					locs[0].File, locs[0].Line = l.File, l.Line
				}
			}
		}
		if err != nil {
			lastErr = err
			continue
		}
		if len(locs) > 0 {
			bp.locs[bin] = locs
			if !bp.resolved {
				// Report the line the program stops at (past a prologue), as gdb does.
				bp.actual = locs[0]
				if l, ok := bin.LineForPC(locs[0].Addr); ok && l.Line > 0 {
					bp.actual.File, bp.actual.Line = l.File, l.Line
				}
			}
			bp.resolved = true
		}
	}
	if !bp.resolved {
		switch {
		case bp.kind == bpSource && (lastErr == nil || errors.Is(lastErr, symbols.ErrNoCode)):
			bp.message = fmt.Sprintf("no code for %s:%d in the program or its libraries", filepath.Base(bp.path), bp.line)
		case bp.kind == bpFunction && lastErr == nil:
			bp.message = fmt.Sprintf("no function %q in the program or its libraries", bp.fn)
		case lastErr != nil:
			bp.message = lastErr.Error()
		default:
			bp.message = "no location"
		}
	}
}

// addrsFor returns the run-time addresses of bp in rank r (whose modules are known).
func (bp *userBP) addrsFor(mods []*symbols.Module) []uint64 {
	var out []uint64
	for _, m := range mods {
		for _, l := range bp.locs[m.Bin] {
			out = append(out, l.Addr+m.Bias)
		}
	}
	return out
}

// allUser returns every address breakpoint (not data breakpoints); b.mu must be held.
func (b *breakpoints) allUser() []*userBP {
	var out []*userBP
	for _, l := range b.source {
		out = append(out, l...)
	}
	out = append(out, b.funcs...)
	out = append(out, b.instrs...)
	if b.entry != nil {
		out = append(out, b.entry)
	}
	return out
}

// sync makes what is planted in each of ranks match the breakpoints: one batch of
// SetBreakpoint/ResetBreakpoint Updates per rank, the ranks of a node in parallel.
func (b *breakpoints) sync(ctx context.Context, ranks []*Rank) {
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() {
			defer b.j.recoverPanic(fmt.Sprintf("breakpoints of rank %d", r.Num))
			b.syncRank(ctx, r)
		})
	}
	wg.Wait()
}

func (b *breakpoints) syncRank(ctx context.Context, r *Rank) {
	mods, err := r.sym.modules(ctx, false)
	if err != nil {
		return
	}
	rs := &r.sym
	rs.mu.Lock()
	trap, order := rs.arch.Trap(), rs.arch.ByteOrder
	rs.mu.Unlock()
	b.mu.Lock()
	want := map[uint64][]*userBP{}
	for _, bp := range b.allUser() {
		if !bp.ranks.Contains(r.Num) || !bp.resolved {
			continue
		}
		if bp.kind == bpEntry && b.entryDone(r) {
			continue
		}
		for _, a := range bp.addrsFor(mods) {
			want[a] = append(want[a], bp)
		}
	}
	sites := b.sites[r]
	if sites == nil {
		sites = map[uint64]*site{}
		b.sites[r] = sites
	}
	var cmds []cdti.Command
	var adds []uint64
	for a := range want {
		s := sites[a]
		if s != nil && (s.user || s.temp > 0) {
			s.user = true
			continue
		}
		adds = append(adds, a)
	}
	var removes []uint64
	for a, s := range sites {
		if s.user && want[a] == nil {
			s.user = false
			if s.temp == 0 {
				removes = append(removes, a)
			}
		}
	}
	b.mu.Unlock()
	sort.Slice(adds, func(i, k int) bool { return adds[i] < adds[k] })
	origs := map[uint64][]byte{}
	for _, a := range adds {
		orig := make([]byte, len(trap))
		if _, err := rs.mem.ReadAt(orig, a); err != nil {
			b.noteFailure(want[a], r, fmt.Sprintf("read the instruction at %#x: %v", a, err))
			continue
		}
		origs[a] = orig
		cmds = append(cmds, &cdti.SetBreakpoint{Addr: a, Instruction: cdti.InstructionValue(order, trap)})
	}
	b.mu.Lock()
	for _, a := range removes {
		s := sites[a]
		cmds = append(cmds, &cdti.ResetBreakpoint{Addr: a, Instruction: cdti.InstructionValue(order, s.orig)})
		delete(sites, a)
	}
	b.mu.Unlock()
	if len(cmds) == 0 {
		return
	}
	res, err := r.node.client.UpdateBatch(ctx, uint32(r.Num), cmds)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, c := range cmds {
		set, isSet := c.(*cdti.SetBreakpoint)
		if !isSet {
			continue
		}
		ok := err == nil && i < len(res) && res[i].Code == cdti.CmdSuccess
		if !ok {
			why := "not sent"
			if err != nil {
				why = err.Error()
			} else if i < len(res) {
				why = res[i].Code.String()
			}
			for _, bp := range want[set.Addr] {
				if bp.failures == nil {
					bp.failures = map[int]string{}
				}
				bp.failures[r.Num] = fmt.Sprintf("plant at %#x: %s", set.Addr, why)
			}
			continue
		}
		sites[set.Addr] = &site{orig: origs[set.Addr], user: true}
	}
}

func (b *breakpoints) noteFailure(bps []*userBP, r *Rank, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bp := range bps {
		if bp.failures == nil {
			bp.failures = map[int]string{}
		}
		bp.failures[r.Num] = msg
	}
}

// plantTemp adds a step's reference to a trap at addr in r, planting it if needed.
func (b *breakpoints) plantTemp(ctx context.Context, r *Rank, addr uint64) error {
	rs := &r.sym
	rs.mu.Lock()
	trap, order := rs.arch.Trap(), rs.arch.ByteOrder
	rs.mu.Unlock()
	b.mu.Lock()
	sites := b.sites[r]
	if sites == nil {
		sites = map[uint64]*site{}
		b.sites[r] = sites
	}
	if s := sites[addr]; s != nil {
		s.temp++
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	orig := make([]byte, len(trap))
	if _, err := rs.mem.ReadAt(orig, addr); err != nil {
		return err
	}
	res, err := r.node.client.Update(ctx, uint32(r.Num), &cdti.SetBreakpoint{Addr: addr, Instruction: cdti.InstructionValue(order, trap)})
	if err != nil {
		return err
	}
	if res[0].Code != cdti.CmdSuccess {
		return fmt.Errorf("plant a breakpoint at %#x: %v", addr, res[0].Code)
	}
	b.mu.Lock()
	if s := sites[addr]; s != nil {
		s.temp++ // planted meanwhile by someone else: the agent keeps one trap
	} else {
		sites[addr] = &site{orig: orig, temp: 1}
	}
	b.mu.Unlock()
	return nil
}

// removeTemp drops a step's reference to the trap at addr, removing it when unused.
func (b *breakpoints) removeTemp(ctx context.Context, r *Rank, addr uint64) {
	b.mu.Lock()
	s := b.sites[r][addr]
	if s == nil {
		b.mu.Unlock()
		return
	}
	s.temp--
	if s.temp > 0 || s.user {
		b.mu.Unlock()
		return
	}
	delete(b.sites[r], addr)
	b.mu.Unlock()
	r.sym.mu.Lock()
	order := r.sym.arch.ByteOrder
	r.sym.mu.Unlock()
	r.node.client.Update(ctx, uint32(r.Num), &cdti.ResetBreakpoint{Addr: addr, Instruction: cdti.InstructionValue(order, s.orig)})
}

// isUserSite reports whether a user breakpoint is planted at addr in r.
func (b *breakpoints) isUserSite(r *Rank, addr uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sites[r][addr]
	return s != nil && s.user
}

// removeAll takes every trap and watchpoint out of every rank (detach).
func (b *breakpoints) removeAll(ctx context.Context) {
	b.mu.Lock()
	b.source = map[string][]*userBP{}
	b.funcs, b.instrs, b.data, b.entry = nil, nil, nil, nil
	b.mu.Unlock()
	ranks := b.j.liveRanks()
	b.sync(ctx, ranks)
	b.syncWatches(ctx, ranks)
}

// entryDone reports whether r has passed the stopAtEntry breakpoint; b.mu must be held.
func (b *breakpoints) entryDone(r *Rank) bool { return b.passed[r] }

// hit decides what a breakpoint notification at addr means for rank r: whether to stop, and
// why. Conditions are evaluated in the stopped thread's innermost frame; hit counts are kept
// per rank; log points print and never stop.
func (b *breakpoints) hit(r *Rank, tid int, addr uint64) (bool, stopInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
	defer cancel()
	mods, _ := r.sym.modules(ctx, false)
	b.mu.Lock()
	var matched []*userBP
	for _, bp := range b.allUser() {
		if !bp.ranks.Contains(r.Num) {
			continue
		}
		for _, a := range bp.addrsFor(mods) {
			if a == addr {
				matched = append(matched, bp)
				break
			}
		}
	}
	b.mu.Unlock()
	info := stopInfo{reason: "breakpoint", tid: tid}
	if len(matched) == 0 {
		if b.isUserSite(r, addr) {
			return true, info
		}
		// The agent reports a Breakpoint only for a trap it planted, so this is one that was
		// removed after the thread hit it (a temporary one of a step that has ended, or a
		// breakpoint the user cleared while this hit waited behind another stop). The agent
		// put the thread back on addr, where the original instruction stands again: it runs
		// as if the trap had never been there.
		b.j.logf("rank %d: hit of removed breakpoint %#x: go on", r.Num, addr)
		return false, info
	}
	stop := false
	for _, bp := range matched {
		if bp.kind == bpEntry {
			b.mu.Lock()
			b.passed[r] = true // not planted on this rank again
			b.mu.Unlock()
			go b.syncRank(context.Background(), r)
			return true, stopInfo{reason: "entry", tid: tid}
		}
		ok, err := b.j.conditionHolds(ctx, r, tid, bp.cond)
		if err != nil {
			b.j.output("console", fmt.Sprintf("rank %d: breakpoint %d: condition %q: %v\n", r.Num, bp.id, bp.cond, err))
			ok = true // as gdb does: an error in a condition stops
		}
		if !ok {
			continue
		}
		b.j.mu.Lock()
		r.hits[bp.id]++
		n := r.hits[bp.id]
		b.j.mu.Unlock()
		if !hitConditionHolds(bp.hitCond, n) {
			continue
		}
		if bp.logMsg != "" {
			b.j.logPoint(ctx, r, tid, bp.logMsg)
			continue
		}
		stop = true
		info.bps = append(info.bps, bp.id)
		switch bp.kind {
		case bpFunction:
			info.reason = "function breakpoint"
		case bpInstruction:
			info.reason = "instruction breakpoint"
		}
	}
	return stop, info
}

// parseHitCondition checks a hit condition: "N" (stop from the Nth hit on), ">= N", "> N",
// "== N", "< N", "<= N", "% N" (every Nth hit).
func parseHitCondition(s string) (op string, n int, err error) {
	s = strings.TrimSpace(s)
	for _, o := range []string{">=", "<=", "==", ">", "<", "%", "="} {
		if rest, ok := strings.CutPrefix(s, o); ok {
			op, s = o, strings.TrimSpace(rest)
			break
		}
	}
	n, err = strconv.Atoi(s)
	if err != nil || n < 0 || (op == "%" && n == 0) {
		return "", 0, fmt.Errorf("hit condition %q: want a count, optionally after >=, >, ==, <=, < or %%", s)
	}
	return op, n, nil
}

func hitConditionHolds(cond string, hits int) bool {
	if strings.TrimSpace(cond) == "" {
		return true
	}
	op, n, err := parseHitCondition(cond)
	if err != nil {
		return true
	}
	switch op {
	case "", ">=":
		return hits >= n
	case ">":
		return hits > n
	case "==", "=":
		return hits == n
	case "<":
		return hits < n
	case "<=":
		return hits <= n
	case "%":
		return hits%n == 0
	}
	return true
}
