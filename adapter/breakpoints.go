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

// userBP is one breakpoint the client set. An address breakpoint is resolved once per distinct
// binary (link-time locations), then planted on every rank of its rank set at that rank's load
// bias; a data breakpoint is armed as a watchpoint in every rank of its set.
type userBP struct {
	id    int
	kind  bpKind
	ranks rankset.Set // the focus when it was set

	path         string // bpSource: the file as the client names it
	debugPath    string // bpSource: the file as the debug information names it
	line, column int
	fn           string          // bpFunction
	instrBin     *symbols.Binary // bpInstruction: binary, link-time address, and the address as given
	instrAddr    uint64
	instrRef     uint64
	data         *dataTarget // bpData

	bpMeta

	locs     map[*symbols.Binary][]symbols.Location // resolution per binary
	resolved bool
	message  string
	refused  string           // why the request was not taken (not kept): answered failed
	actual   symbols.Location // where it really stops, for the response
	planted  int              // ranks it is planted on
	failures map[int]string   // rank → why planting failed
}

// samePlace reports whether bp and o are the same breakpoint requested again: a request that
// names the same place keeps the breakpoint's id and hit counts.
func (bp *userBP) samePlace(o *userBP) bool {
	if bp.kind != o.kind {
		return false
	}
	switch bp.kind {
	case bpSource:
		return bp.line == o.line
	case bpFunction:
		return bp.fn == o.fn
	case bpInstruction:
		return bp.instrBin == o.instrBin && bp.instrAddr == o.instrAddr
	case bpData:
		return bp.data.dataID == o.data.dataID && bp.data.access == o.data.access
	}
	return false
}

// bpMeta is what a breakpoint does when hit, checked once when it is set: a condition (an
// expression evaluated in the stopped thread's innermost frame), a hit condition and a log
// message (a log point prints and never stops).
type bpMeta struct {
	cond string
	hit  *hitCondition // nil: every hit counts
	log  []logPart     // nil: not a log point
}

// newBPMeta checks a breakpoint's condition, hit condition and log message.
func newBPMeta(cond, hit, logMsg string) (bpMeta, error) {
	m := bpMeta{cond: strings.TrimSpace(cond)}
	if strings.TrimSpace(hit) != "" {
		op, n, err := parseHitCondition(hit)
		if err != nil {
			return bpMeta{}, err
		}
		m.hit = &hitCondition{op: op, n: n}
	}
	if logMsg != "" {
		m.log = parseLogMessage(logMsg)
	}
	return m, nil
}

// bpSet names one list of breakpoints that a request replaces as a whole: the source
// breakpoints of one file, or all function, instruction or data breakpoints.
type bpSet struct {
	kind bpKind
	file string // bpSource: the file, cleaned
}

// bpRequest is one breakpoint of a set request, whatever its kind: where (a userBP holding its
// kind and location), what it does when hit, or why it cannot be a breakpoint.
type bpRequest struct {
	at      *userBP
	meta    bpMeta
	invalid string // the request names nothing that can be planted: answered failed, not kept
}

// breakpoints holds the session's breakpoints and which of the adapter's uses want a trap
// where. The agent owns what is under a trap: the original instruction is never kept here.
type breakpoints struct {
	j *Job

	mu      sync.Mutex
	next    int
	sets    map[bpSet][]*userBP
	entry   *userBP
	sites   map[*Rank]map[uint64]*site
	watches map[*Rank]map[uint64]*userBP
	passed  map[*Rank]bool // ranks past the stopAtEntry breakpoint
}

func newBreakpoints(j *Job) *breakpoints {
	return &breakpoints{j: j, sets: map[bpSet][]*userBP{}, sites: map[*Rank]map[uint64]*site{},
		watches: map[*Rank]map[uint64]*userBP{}, passed: map[*Rank]bool{}}
}

func (b *breakpoints) newID() int {
	b.next++
	return b.next
}

// snapshots copies breakpoints for a response, in their order (snapshot, under b.mu).
func (b *breakpoints) snapshots(list []*userBP) []*userBP {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*userBP, len(list))
	for i, bp := range list {
		out[i] = bp.snapshot()
	}
	return out
}

// noDebugRefusal is the message of breakpoints set in a job run without debugging.
const noDebugRefusal = "the job runs without debugging (noDebug)"

// setBreakpoints is the one path of every set-breakpoints request. It makes the breakpoints of
// set the requested ones, in order: a breakpoint requested again at the same place keeps its id
// and hit counts, new ones are resolved and planted, the ones no longer requested are taken
// out. One rule set for every kind: in a core file nothing can stop, with noDebug nothing is
// planted (each requested breakpoint is answered failed with the reason, and nothing is kept),
// and a request that names nothing plantable is answered failed and not kept. It returns one
// breakpoint per request; b.mu guards their fields.
func (j *Job) setBreakpoints(ctx context.Context, set bpSet, requested []bpRequest) []*userBP {
	out := make([]*userBP, len(requested))
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
	var list, fresh []*userBP
	used := map[*userBP]bool{}
	for i, rq := range requested {
		if refuse != "" || rq.invalid != "" {
			bp := *rq.at
			bp.refused = refuse
			if bp.refused == "" {
				bp.refused = rq.invalid
			}
			out[i] = &bp
			continue
		}
		var bp *userBP
		for _, o := range old {
			if !used[o] && o.samePlace(rq.at) {
				bp = o
				break
			}
		}
		if bp == nil {
			bp = rq.at
			bp.id, bp.ranks = b.newID(), focus
			if bp.kind == bpData && bp.data.module == "" {
				bp.ranks = rankset.Of(bp.data.rank)
			}
			fresh = append(fresh, bp)
		}
		used[bp] = true
		bp.bpMeta = rq.meta
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
	if set.kind == bpData {
		b.mu.Lock()
		for _, bp := range b.sets[set] {
			bp.failures = nil
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
func (j *Job) applyBreakpoints(ctx context.Context, fresh []*userBP) {
	if len(fresh) > 0 {
		// Libraries may have been loaded since the link maps were read.
		j.refreshModules(ctx, j.liveRanks())
	}
	bins := j.binaries(ctx)
	for _, bp := range fresh {
		j.bps.resolve(bp, bins)
	}
	ranks := j.liveRanks()
	j.bps.mu.Lock()
	for _, bp := range j.bps.allUser() {
		bp.failures = nil
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
		bp.planted = 0
		for _, r := range ranks {
			if !bp.ranks.Contains(r.Num) || bp.failures[r.Num] != "" {
				continue
			}
			if len(bp.locs) > 0 {
				bp.planted++
			}
		}
	}
}

// instructionAt locates an instruction breakpoint's address (ref plus off) in the modules of
// the reference rank.
func (j *Job) instructionAt(ctx context.Context, ref string, off int) (*userBP, error) {
	addr, err := parseAddress(ref, off)
	if err != nil {
		return nil, err
	}
	r := j.referenceRank()
	if r == nil {
		return nil, errors.New("no rank is alive")
	}
	mods, _ := r.sym.modules(ctx, false)
	for _, m := range mods {
		if m.Contains(addr) {
			return &userBP{kind: bpInstruction, instrBin: m.Bin, instrAddr: addr - m.Bias, instrRef: addr}, nil
		}
	}
	return nil, fmt.Errorf("address %#x is in no module of rank %d", addr, r.Num)
}

// parseAddress reads "0x1234" (or decimal) plus an offset.
func parseAddress(ref string, off int) (uint64, error) {
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

// referenceRank is the rank whose addresses instruction and memory references are read in:
// the rank whose stack the client read last (the frame it looks at), else the first live
// rank of the focus.
func (j *Job) referenceRank() *Rank {
	j.mu.Lock()
	v := j.viewRank
	alive := v != nil && (v.state == rankStopped || v.state == rankRunning)
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

// armEntry plants the stopAtEntry breakpoint on main in every rank; the ranks stop there
// together.
func (j *Job) armEntry() error {
	ctx, cancel := context.WithTimeout(j.ctx, defaultTimeout)
	defer cancel()
	var all rankset.Set
	for _, r := range j.ranks {
		all = all.Add(r.Num)
	}
	bp := &userBP{id: 0, kind: bpEntry, fn: "main", ranks: all}
	if !j.bps.resolve(bp, j.binaries(ctx)) {
		return fmt.Errorf("no main function: %s", bp.message)
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

// resolve computes a breakpoint's link-time locations in each binary. The lookups read only
// what names the breakpoint's place, which never changes; the result is stored under b.mu,
// since bp may already be in b.sets, where hits, planting and responses read it. It returns
// whether bp resolved.
func (b *breakpoints) resolve(bp *userBP, bins []*symbols.Binary) (resolved bool) {
	all := map[*symbols.Binary][]symbols.Location{}
	var actual symbols.Location
	var lastErr error
	for i, bin := range bins {
		if (bp.kind == bpFunction || bp.kind == bpEntry) && resolved && i > 0 {
			// Found in the program: its libraries are not searched (they are large, and a
			// program's own function is what a user names).
			break
		}
		var locs []symbols.Location
		var err error
		switch bp.kind {
		case bpSource:
			locs, err = bin.LineBreakpoints(bp.debugPath, bp.line)
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
		case bp.kind == bpSource && (lastErr == nil || errors.Is(lastErr, symbols.ErrNoCode)):
			message = fmt.Sprintf("no code for %s:%d in the program or its libraries", filepath.Base(bp.path), bp.line)
		case bp.kind == bpFunction && lastErr == nil:
			message = fmt.Sprintf("no function %q in the program or its libraries", bp.fn)
		case lastErr != nil:
			message = lastErr.Error()
		default:
			message = "no location"
		}
	}
	b.mu.Lock()
	bp.locs, bp.resolved, bp.message = all, resolved, message
	if resolved {
		bp.actual = actual
	}
	b.mu.Unlock()
	return resolved
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
	var files []string
	for set := range b.sets {
		if set.kind == bpSource {
			files = append(files, set.file)
		}
	}
	sort.Strings(files)
	var out []*userBP
	for _, f := range files {
		out = append(out, b.sets[bpSet{kind: bpSource, file: f}]...)
	}
	out = append(out, b.sets[bpSet{kind: bpFunction}]...)
	out = append(out, b.sets[bpSet{kind: bpInstruction}]...)
	if b.entry != nil {
		out = append(out, b.entry)
	}
	return out
}

// dataBPs returns the data breakpoints; b.mu must be held.
func (b *breakpoints) dataBPs() []*userBP { return b.sets[bpSet{kind: bpData}] }

// removeAll takes every trap and watchpoint out of every rank (detach).
func (b *breakpoints) removeAll(ctx context.Context) {
	b.mu.Lock()
	b.sets = map[bpSet][]*userBP{}
	b.entry = nil
	b.mu.Unlock()
	ranks := b.j.liveRanks()
	b.sync(ctx, ranks)
	b.syncWatches(ctx, ranks)
}

// entryDone reports whether r has passed the stopAtEntry breakpoint; b.mu must be held.
func (b *breakpoints) entryDone(r *Rank) bool { return b.passed[r] }

// snapshots copies breakpoints for a response, in their order: copies the job no longer
// changes, to format without its lock.
func (j *Job) snapshots(list []*userBP) []*userBP { return j.bps.snapshots(list) }
