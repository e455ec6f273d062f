package debugger

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hpcdap/hpcdap/rankset"
	"github.com/hpcdap/hpcdap/symbols"
)

// bpKind is the kind of a user breakpoint.
type bpKind int

const (
	BPSource bpKind = iota
	BPFunction
	BPInstruction
	BPData
	bpEntry // the internal breakpoint on main for stopAtEntry
)

// Breakpoint is one breakpoint the client set. An address breakpoint is resolved once per distinct
// binary (link-time locations), then planted on every rank of its rank set at that rank's load
// bias; a data breakpoint is armed as a watchpoint in every rank of its set.
type Breakpoint struct {
	ID    int
	Kind  bpKind
	Ranks rankset.Set // the focus when it was set
	Owner int         // the BPSet.Owner of the request that set it

	Path         string // BPSource: the file as the client names it
	DebugPath    string // BPSource: the file as the debug information names it
	Line, column int
	Fn           string          // BPFunction
	instrBin     *symbols.Binary // BPInstruction: binary, link-time address, and the address as given
	instrAddr    uint64
	InstrRef     uint64
	Data         *DataTarget // BPData

	BPMeta

	locs     map[*symbols.Binary][]symbols.Location // resolution per binary
	Resolved bool
	Message  string
	Refused  string           // why the request was not taken (not kept): answered failed
	Actual   symbols.Location // where it really stops, for the response
	Planted  int              // ranks it is planted on
	Failures map[int]string   // rank → why planting failed

	compiled     map[siteKey]*compiledSite // the site compiled for agents, per binary and address
	fallbackSaid bool                      // the console was told the condition is evaluated here
}

// samePlace reports whether bp and o are the same breakpoint requested again: a request that
// names the same place keeps the breakpoint's id and hit counts.
func (bp *Breakpoint) samePlace(o *Breakpoint) bool {
	if bp.Kind != o.Kind {
		return false
	}
	switch bp.Kind {
	case BPSource:
		return bp.Line == o.Line
	case BPFunction:
		return bp.Fn == o.Fn
	case BPInstruction:
		return bp.instrBin == o.instrBin && bp.instrAddr == o.instrAddr
	case BPData:
		return bp.Data.dataID == o.Data.dataID && bp.Data.Access == o.Data.Access
	}
	return false
}

// BPMeta is what a breakpoint does when hit, checked once when it is set: a condition (an
// expression evaluated in the stopped thread's innermost frame), a hit condition and a log
// message (a log point prints and never stops).
type BPMeta struct {
	cond string
	hit  *hitCondition // nil: every hit counts
	log  []logPart     // nil: not a log point
}

// NewBPMeta checks a breakpoint's condition, hit condition and log message.
func NewBPMeta(cond, hit, logMsg string) (BPMeta, error) {
	m := BPMeta{cond: strings.TrimSpace(cond)}
	if strings.TrimSpace(hit) != "" {
		op, n, err := parseHitCondition(hit)
		if err != nil {
			return BPMeta{}, err
		}
		m.hit = &hitCondition{op: op, n: n}
	}
	if logMsg != "" {
		m.log = parseLogMessage(logMsg)
	}
	return m, nil
}

// BPSet names one list of breakpoints that a request replaces as a whole: the source
// breakpoints of one file, or all function, instruction or data breakpoints, of one owner.
// Owners are the front end's (the clients of a shared session each set their own lists); the
// job plants the breakpoints of every owner.
type BPSet struct {
	Kind  bpKind
	File  string // BPSource: the file, cleaned
	Owner int
}

// BPRequest is one breakpoint of a set request, whatever its kind: where (a Breakpoint
// holding its kind and location), what it does when hit, or why it cannot be a breakpoint.
type BPRequest struct {
	At      *Breakpoint
	Meta    BPMeta
	Invalid string // the request names nothing that can be planted: answered failed, not kept
}

// breakpoints holds the session's breakpoints and which of the adapter's uses want a trap
// where. The agent owns what is under a trap: the original instruction is never kept here.
type breakpoints struct {
	j *Job

	mu      sync.Mutex
	next    int
	sets    map[BPSet][]*Breakpoint
	entry   *Breakpoint
	sites   map[*Rank]map[uint64]*site
	watches map[*Rank]map[uint64]*Breakpoint
	passed  map[*Rank]bool // ranks past the stopAtEntry breakpoint

	// cnkOrigs: behind a BG/Q CNK, whose memory reads show a planted trap and which keeps no
	// copy of what it replaced (its ResetBreakpoint wants the original instruction,
	// cdti-v6.md §8.8), the instruction under each trapped address of each rank, read before
	// the first trap went there. Text does not change: an entry stays once read.
	// cnkPlanted, under origMu as well, are the addresses of cnkOrigs where a trap stands
	// now, which memory reads show as the original instruction (shadowCNK).
	origMu     sync.Mutex
	cnkOrigs   map[*Rank]map[uint64][]byte
	cnkPlanted map[*Rank]map[uint64]bool
}

func newBreakpoints(j *Job) *breakpoints {
	return &breakpoints{j: j, sets: map[BPSet][]*Breakpoint{}, sites: map[*Rank]map[uint64]*site{},
		watches: map[*Rank]map[uint64]*Breakpoint{}, passed: map[*Rank]bool{}}
}

func (b *breakpoints) newID() int {
	b.next++
	return b.next
}

// snapshots copies breakpoints for a response, in their order (snapshot, under b.mu).
func (b *breakpoints) snapshots(list []*Breakpoint) []*Breakpoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*Breakpoint, len(list))
	for i, bp := range list {
		out[i] = bp.snapshot()
	}
	return out
}

// noDebugRefusal is the message of breakpoints set in a job run without debugging.
const noDebugRefusal = "the job runs without debugging (noDebug)"

// SetBreakpoints is the one path of every set-breakpoints request. It makes the breakpoints of
// set the requested ones, in order: a breakpoint requested again at the same place keeps its id
// and hit counts, new ones are resolved and planted, the ones no longer requested are taken
// out. One rule set for every kind: in a core file nothing can stop, with noDebug nothing is
// planted (each requested breakpoint is answered failed with the reason, and nothing is kept),
// and a request that names nothing plantable is answered failed and not kept. It returns one
// breakpoint per request; b.mu guards their fields.
func (j *Job) SetBreakpoints(ctx context.Context, set BPSet, requested []BPRequest) []*Breakpoint {
	out := make([]*Breakpoint, len(requested))
	refuse := ""
	if err := j.back.frozen(); err != nil {
		refuse = err.Error()
	} else if j.noStop {
		refuse = noDebugRefusal
	}
	focus := j.focusSet()
	b := j.bps
	b.mu.Lock()
	old := b.sets[set]
	var list, fresh []*Breakpoint
	used := map[*Breakpoint]bool{}
	for i, rq := range requested {
		if rq.Invalid == "" {
			rq.Invalid = rq.Meta.syntaxError()
		}
		if refuse != "" || rq.Invalid != "" {
			bp := *rq.At
			bp.Refused = refuse
			if bp.Refused == "" {
				bp.Refused = rq.Invalid
			}
			out[i] = &bp
			continue
		}
		var bp *Breakpoint
		for _, o := range old {
			if !used[o] && o.samePlace(rq.At) {
				bp = o
				break
			}
		}
		if bp == nil {
			bp = rq.At
			bp.ID, bp.Ranks, bp.Owner = b.newID(), focus, set.Owner
			if bp.Kind == BPData && bp.Data.module == "" {
				bp.Ranks = rankset.Of(bp.Data.rank)
			}
			fresh = append(fresh, bp)
		}
		used[bp] = true
		bp.BPMeta = rq.Meta
		list = append(list, bp)
		out[i] = bp
	}
	if len(list) == 0 {
		delete(b.sets, set)
	} else {
		b.sets[set] = list
	}
	b.mu.Unlock()
	if refuse != "" {
		return out
	}
	if set.Kind == BPData {
		b.mu.Lock()
		for _, bp := range b.sets[set] {
			bp.Failures = nil
		}
		b.mu.Unlock()
		b.syncWatches(ctx, j.liveRanks())
	} else {
		j.applyBreakpoints(ctx, fresh)
	}
	return out
}

// applyBreakpoints resolves new breakpoints, plants everything on the live ranks and counts
// where each breakpoint went.
func (j *Job) applyBreakpoints(ctx context.Context, fresh []*Breakpoint) {
	if len(fresh) > 0 {
		// Libraries may have been loaded since the link maps were read.
		j.refreshModules(ctx, j.liveRanks())
	}
	bins := j.Binaries(ctx)
	for _, bp := range fresh {
		j.bps.resolve(bp, bins)
	}
	ranks := j.liveRanks()
	j.bps.mu.Lock()
	for _, bp := range j.bps.allUser() {
		bp.Failures = nil
	}
	j.bps.mu.Unlock()
	j.bps.sync(ctx, ranks)
	j.countPlanted(ranks)
	j.updateLibraryWatch(ctx, ranks)
}

// countPlanted records on how many ranks each breakpoint is planted.
func (j *Job) countPlanted(ranks []*Rank) {
	j.bps.mu.Lock()
	defer j.bps.mu.Unlock()
	for _, bp := range j.bps.allUser() {
		bp.Planted = 0
		for _, r := range ranks {
			if !bp.Ranks.Contains(r.Num) || bp.Failures[r.Num] != "" {
				continue
			}
			if len(bp.locs) > 0 {
				bp.Planted++
			}
		}
	}
}

// InstructionAt locates an instruction breakpoint's address (ref plus off) in the modules of
// the reference rank.
func (j *Job) InstructionAt(ctx context.Context, ref string, off int) (*Breakpoint, error) {
	addr, err := ParseAddress(ref, off)
	if err != nil {
		return nil, err
	}
	r := j.ReferenceRank()
	if r == nil {
		return nil, errors.New("no rank is alive")
	}
	mods, _ := r.sym.modules(ctx, false)
	for _, m := range mods {
		if m.Contains(addr) {
			return &Breakpoint{Kind: BPInstruction, instrBin: m.Bin, instrAddr: addr - m.Bias, InstrRef: addr}, nil
		}
	}
	return nil, fmt.Errorf("address %#x is in no module of rank %d", addr, r.Num)
}

// ParseAddress reads "0x1234" (or decimal) plus an offset.
func ParseAddress(ref string, off int) (uint64, error) {
	a, err := strconv.ParseUint(strings.TrimSpace(ref), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an address", ref)
	}
	return a + uint64(int64(off)), nil
}

// focusSet returns the current focus.
func (j *Job) focusSet() rankset.Set {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.focus
}

// ReferenceRank is the rank whose addresses instruction and memory references are read in:
// the rank whose stack the client read last (the frame it looks at), else the first live
// rank of the focus.
func (j *Job) ReferenceRank() *Rank {
	j.mu.Lock()
	v := j.viewRank
	alive := v != nil && (v.state == RankStopped || v.state == RankRunning)
	j.mu.Unlock()
	if alive {
		return v
	}
	live := j.liveRanks()
	focus := j.focusSet()
	for _, r := range live {
		if focus.Contains(r.Num) {
			return r
		}
	}
	if len(live) > 0 {
		return live[0]
	}
	return nil
}

// ArmEntry plants the stopAtEntry breakpoint on main in every rank; the ranks stop there
// together.
func (j *Job) ArmEntry() error {
	ctx, cancel := context.WithTimeout(j.ctx, DefaultTimeout)
	defer cancel()
	var all rankset.Set
	for _, r := range j.ranks {
		all = all.Add(r.Num)
	}
	bp := &Breakpoint{ID: 0, Kind: bpEntry, Fn: "main", Ranks: all}
	if !j.bps.resolve(bp, j.Binaries(ctx)) {
		return fmt.Errorf("no main function: %s", bp.Message)
	}
	j.bps.mu.Lock()
	j.bps.entry = bp
	j.bps.mu.Unlock()
	live := j.liveRanks()
	j.mu.Lock()
	j.entryWait = map[*Rank]bool{}
	for _, r := range live {
		j.entryWait[r] = true
	}
	j.mu.Unlock()
	j.bps.sync(ctx, live)
	return nil
}

// Binaries returns every distinct binary mapped in the job's live ranks.
func (j *Job) Binaries(ctx context.Context) []*symbols.Binary {
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
		if r.state == RankRunning || r.state == RankStopped {
			out = append(out, r)
		}
	}
	return out
}

// resolve computes a breakpoint's link-time locations in each binary. The lookups read only
// what names the breakpoint's place, which never changes; the result is stored under b.mu,
// since bp may already be in b.sets, where hits, planting and responses read it. It returns
// whether bp resolved.
func (b *breakpoints) resolve(bp *Breakpoint, bins []*symbols.Binary) (resolved bool) {
	all := map[*symbols.Binary][]symbols.Location{}
	var actual symbols.Location
	var lastErr error
	for i, bin := range bins {
		if (bp.Kind == BPFunction || bp.Kind == bpEntry) && resolved && i > 0 {
			// Found in the program: its libraries are not searched (they are large, and a
			// program's own function is what a user names).
			break
		}
		var locs []symbols.Location
		var err error
		switch bp.Kind {
		case BPSource:
			locs, err = bin.LineBreakpoints(bp.DebugPath, bp.Line)
		case BPFunction, bpEntry:
			locs, err = bin.FunctionBreakpoints(bp.Fn)
		case BPInstruction:
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
			all[bin] = locs
			if !resolved {
				// Report the line the program stops at (past a prologue), as gdb does.
				actual = locs[0]
				if l, ok := bin.LineForPC(locs[0].Addr); ok && l.Line > 0 {
					actual.File, actual.Line = l.File, l.Line
				}
			}
			resolved = true
		}
	}
	message := ""
	if !resolved {
		switch {
		case bp.Kind == BPSource && (lastErr == nil || errors.Is(lastErr, symbols.ErrNoCode)):
			message = fmt.Sprintf("no code for %s:%d in the program or its libraries", filepath.Base(bp.Path), bp.Line)
		case bp.Kind == BPFunction && lastErr == nil:
			message = fmt.Sprintf("no function %q in the program or its libraries", bp.Fn)
		case lastErr != nil:
			message = lastErr.Error()
		default:
			message = "no location"
		}
	}
	b.mu.Lock()
	bp.locs, bp.Resolved, bp.Message = all, resolved, message
	if resolved {
		bp.Actual = actual
	}
	b.mu.Unlock()
	return resolved
}

// addrsFor returns the run-time addresses of bp in rank r (whose modules are known).
func (bp *Breakpoint) addrsFor(mods []*symbols.Module) []uint64 {
	var out []uint64
	for _, m := range mods {
		for _, l := range bp.locs[m.Bin] {
			out = append(out, l.Addr+m.Bias)
		}
	}
	return out
}

// allUser returns every address breakpoint (not data breakpoints), of every owner: source
// breakpoints, then function, then instruction breakpoints, each kind by owner and file;
// b.mu must be held.
func (b *breakpoints) allUser() []*Breakpoint {
	var out []*Breakpoint
	for _, set := range b.orderedSets() {
		if set.Kind != BPData {
			out = append(out, b.sets[set]...)
		}
	}
	if b.entry != nil {
		out = append(out, b.entry)
	}
	return out
}

// BreakpointOwner returns the owner (BPSet.Owner) of the breakpoint with this id, and whether
// the job has it.
func (j *Job) BreakpointOwner(id int) (int, bool) {
	b := j.bps
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, list := range b.sets {
		for _, bp := range list {
			if bp.ID == id {
				return bp.Owner, true
			}
		}
	}
	return 0, false
}

// dataBPs returns the data breakpoints of every owner, by owner; b.mu must be held.
func (b *breakpoints) dataBPs() []*Breakpoint {
	var out []*Breakpoint
	for _, set := range b.orderedSets() {
		if set.Kind == BPData {
			out = append(out, b.sets[set]...)
		}
	}
	return out
}

// orderedSets returns the keys of b.sets by kind, owner and file; b.mu must be held.
func (b *breakpoints) orderedSets() []BPSet {
	keys := make([]BPSet, 0, len(b.sets))
	for set := range b.sets {
		keys = append(keys, set)
	}
	sort.Slice(keys, func(x, y int) bool {
		p, q := keys[x], keys[y]
		if p.Kind != q.Kind {
			return p.Kind < q.Kind
		}
		if p.Owner != q.Owner {
			return p.Owner < q.Owner
		}
		return p.File < q.File
	})
	return keys
}

// RemoveBreakpointsOf takes out every breakpoint of one owner, as if it had set each of its
// lists empty (a client leaving a shared session); the other owners' breakpoints stay.
func (j *Job) RemoveBreakpointsOf(ctx context.Context, owner int) {
	j.bps.mu.Lock()
	var mine []BPSet
	for set := range j.bps.sets {
		if set.Owner == owner {
			mine = append(mine, set)
		}
	}
	j.bps.mu.Unlock()
	for _, set := range mine {
		j.SetBreakpoints(ctx, set, nil)
	}
}

// removeAll takes every trap and watchpoint out of every rank (detach).
func (b *breakpoints) removeAll(ctx context.Context) {
	b.mu.Lock()
	b.sets = map[BPSet][]*Breakpoint{}
	b.entry = nil
	b.mu.Unlock()
	ranks := b.j.liveRanks()
	b.sync(ctx, ranks)
	b.syncWatches(ctx, ranks)
}

// entryDone reports whether r has passed the stopAtEntry breakpoint; b.mu must be held.
func (b *breakpoints) entryDone(r *Rank) bool { return b.passed[r] }

// Snapshots copies breakpoints for a response, in their order: copies the job no longer
// changes, to format without its lock.
func (j *Job) Snapshots(list []*Breakpoint) []*Breakpoint { return j.bps.snapshots(list) }
