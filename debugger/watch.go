package debugger

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// Data breakpoints are hardware watchpoints (CDTI SetWatchpoint, propagated to every thread).
// A dataId names the watched object so that it can be found in every rank of the focus:
//
//	m:<module path>:<link-time address hex>:<size>:<expression>   data of a module (globals)
//	a:<rank>:<address hex>:<size>:<expression>                    anything else, in one rank

// DataTarget is where a data breakpoint watches.
type DataTarget struct {
	dataID string
	module string // m: form
	link   uint64
	rank   int // a: form
	addr   uint64
	size   int
	expr   string
	Access cdti.WatchType
}

// ParseDataID decodes a dataId.
func ParseDataID(id string) (*DataTarget, error) {
	parts := strings.SplitN(id, ":", 5)
	if len(parts) != 5 || (parts[0] != "m" && parts[0] != "a") {
		return nil, fmt.Errorf("dataId %q is not one this adapter made", id)
	}
	a, err1 := strconv.ParseUint(parts[2], 16, 64)
	n, err2 := strconv.Atoi(parts[3])
	if err1 != nil || err2 != nil || n <= 0 {
		return nil, fmt.Errorf("dataId %q is malformed", id)
	}
	d := &DataTarget{dataID: id, size: n, expr: parts[4]}
	if parts[0] == "m" {
		// An empty module would make addrIn take the link-time address for rank 0's.
		if parts[1] == "" {
			return nil, fmt.Errorf("dataId %q names no module", id)
		}
		d.module, d.link = parts[1], a
	} else {
		r, err := strconv.Atoi(parts[1])
		if err != nil || r < 0 {
			return nil, fmt.Errorf("dataId %q is malformed", id)
		}
		d.rank, d.addr = r, a
	}
	return d, nil
}

// addrIn returns the run-time address of d in a rank with modules mods (false: not there).
func (d *DataTarget) addrIn(r *Rank, mods []*symbols.Module) (uint64, bool) {
	if d.module == "" {
		return d.addr, r.Num == d.rank
	}
	for _, m := range mods {
		if m.Path == d.module {
			return d.link + m.Bias, true
		}
	}
	return 0, false
}

// syncWatches makes the watchpoints armed in each rank match the data breakpoints, node by
// node like the traps.
func (b *breakpoints) syncWatches(ctx context.Context, ranks []*Rank) {
	b.eachNode("data breakpoints", ranks, func(rs []*Rank) {
		var wg sync.WaitGroup
		for _, r := range rs {
			wg.Go(func() {
				defer b.j.recoverPanic(fmt.Sprintf("data breakpoints of rank %d", r.Num))
				b.syncRankWatches(ctx, r)
			})
		}
		wg.Wait()
	})
}

func (b *breakpoints) syncRankWatches(ctx context.Context, r *Rank) {
	mods, err := r.sym.modules(ctx, false)
	if err != nil {
		return
	}
	b.mu.Lock()
	want := map[uint64]*Breakpoint{}
	for _, bp := range b.dataBPs() {
		if !bp.Ranks.Contains(r.Num) {
			continue
		}
		if a, ok := bp.Data.addrIn(r, mods); ok {
			want[a] = bp
		}
	}
	have := b.watches[r]
	if have == nil {
		have = map[uint64]*Breakpoint{}
		b.watches[r] = have
	}
	var cmds []cdti.Command
	var addrs []uint64
	var removes []uint64
	for a, bp := range have {
		if w := want[a]; w == nil || w.Data.size != bp.Data.size || w.Data.Access != bp.Data.Access {
			removes = append(removes, a)
		}
	}
	slices.Sort(removes)
	for _, a := range removes {
		cmds = append(cmds, &cdti.ResetWatchpoint{Addr: a})
		addrs = append(addrs, a)
		delete(have, a)
	}
	var adds []uint64
	for a := range want {
		if have[a] == nil {
			adds = append(adds, a)
		}
	}
	slices.Sort(adds)
	for _, a := range adds {
		d := want[a].Data
		cmds = append(cmds, &cdti.SetWatchpoint{Addr: a, Length: uint32(d.size), Type: d.Access})
		addrs = append(addrs, a)
	}
	for a, bp := range want {
		if have[a] != nil {
			have[a] = bp // same watch, newer condition
		}
	}
	b.mu.Unlock()
	// One command per Update: a failed watchpoint must not keep the others from being set.
	for i, c := range cmds {
		res, err := r.node.client.Update(ctx, uint32(r.Num), c)
		set, isSet := c.(*cdti.SetWatchpoint)
		if !isSet {
			continue
		}
		bp := want[addrs[i]]
		b.mu.Lock()
		if err != nil || res[0].Code != cdti.CmdSuccess {
			why := ""
			if err != nil {
				why = err.Error()
			} else {
				why = res[0].Code.String()
				if res[0].Code == cdti.CmdHwdUnavail {
					why = "no hardware watchpoint slot left"
				}
			}
			if bp.Failures == nil {
				bp.Failures = map[int]string{}
			}
			bp.Failures[r.Num] = fmt.Sprintf("watch %#x: %s", set.Addr, why)
		} else {
			have[set.Addr] = bp
		}
		b.mu.Unlock()
	}
}

// watchHit decides what a watchpoint notification means for rank r.
func (b *breakpoints) watchHit(r *Rank, tid int, addr uint64) (bool, stopInfo) {
	b.mu.Lock()
	var bp *Breakpoint
	for a, w := range b.watches[r] {
		if addr >= a && addr < a+uint64(w.Data.size) {
			bp = w
		}
	}
	b.mu.Unlock()
	if bp == nil {
		return true, stopInfo{reason: "data breakpoint", tid: tid, text: fmt.Sprintf("watchpoint at %#x", addr)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	if !b.metaHolds(ctx, r, tid, bp) {
		return false, stopInfo{}
	}
	return true, stopInfo{reason: "data breakpoint", tid: tid, bps: []int{bp.ID},
		text: fmt.Sprintf("%s changed on rank %d", bp.Data.expr, r.Num)}
}

// ParseAccessType reads a data breakpoint's access type ("write" when not given).
func ParseAccessType(t string) (cdti.WatchType, error) {
	switch t {
	case "", "write":
		return cdti.WatchWrite, nil
	case "readWrite":
		return cdti.WatchReadWrite, nil
	case "read":
		return cdti.WatchRead, nil
	}
	return 0, fmt.Errorf("access type %q", t)
}
