package debugger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/symbols"
)

// backend is where a job's processes are: ranks that agents serve (liveBackend), or the image
// of a dead process in a core file (coreJob). The job asks it for what differs between the
// two; stacks, scopes, variables and evaluation are the same code for both.
type backend interface {
	// frozen says why the processes can neither run nor be changed (errPostMortem), nil
	// when they can: run control, breakpoints, writes and function calls are refused then.
	frozen() error
	// binaries returns the binaries that breakpoints resolve in.
	binaries(ctx context.Context) []*symbols.Binary
	// viewModules returns the modules of the rank the client looks at.
	viewModules(ctx context.Context) ([]*symbols.Module, error)
	// viewProcess returns the process image of the rank the client looks at.
	viewProcess(ctx context.Context) (*symbols.Process, error)
	// readMemory reads up to count bytes at addr of the rank the client looks at: as many
	// as are readable from addr on.
	readMemory(ctx context.Context, addr uint64, count int) ([]byte, error)
	// traceback returns the agent's walk of a thread's stack (its pcs), to group ranks
	// whose stacks are the same.
	traceback(ctx context.Context, r *Rank, lwp int) ([]cdti.TraceFrame, error)
	// end releases the processes: killed with kill, else left running untouched.
	end(kill bool)
}

// errPostMortem refuses what would run or change the process of a core file.
var errPostMortem = errors.New("a core file cannot run or be changed")

// liveBackend is the back end of ranks that agents serve.
type liveBackend struct{ j *Job }

func (liveBackend) frozen() error { return nil }

func (b liveBackend) binaries(ctx context.Context) []*symbols.Binary { return b.j.Binaries(ctx) }

func (b liveBackend) viewModules(ctx context.Context) ([]*symbols.Module, error) {
	r := b.j.ReferenceRank()
	if r == nil {
		return nil, fmt.Errorf("no rank is alive")
	}
	return r.sym.modules(ctx, true)
}

// viewProcess returns the process that memory and disassembly references are read in (see
// ReferenceRank).
func (b liveBackend) viewProcess(ctx context.Context) (*symbols.Process, error) {
	j := b.j
	r := j.ReferenceRank()
	if r == nil {
		return nil, fmt.Errorf("no rank is alive")
	}
	j.mu.Lock()
	stopped := r.state == RankStopped
	t := r.mainThread()
	j.mu.Unlock()
	if stopped && t != nil {
		if ts, err := r.sym.stack(ctx, t.LWP); err == nil {
			return ts.proc, nil
		}
	}
	mods, err := r.sym.modules(ctx, false)
	if err != nil {
		return nil, err
	}
	return r.sym.newProcess(mods, 0), nil
}

func (b liveBackend) readMemory(ctx context.Context, addr uint64, count int) ([]byte, error) {
	r := b.j.ReferenceRank()
	if r == nil {
		return nil, errors.New("no rank is alive")
	}
	if err := r.sym.ensure(ctx); err != nil {
		return nil, err
	}
	data, _ := r.sym.mem.readDirect(ctx, addr, count)
	if len(data) < count {
		// Read what precedes the first unreadable page.
		data = readPrefix(ctx, r, addr, count)
	}
	return data, nil
}

// readPrefix reads as many bytes of rank r from addr as are readable, page by page.
func readPrefix(ctx context.Context, r *Rank, addr uint64, count int) []byte {
	var out []byte
	for len(out) < count {
		a := addr + uint64(len(out))
		n := min(count-len(out), int(pageSize-a%pageSize))
		b, err := r.sym.mem.readDirect(ctx, a, n)
		out = append(out, b...)
		if err != nil || len(b) < n {
			break
		}
	}
	return out
}

func (liveBackend) traceback(ctx context.Context, r *Rank, lwp int) ([]cdti.TraceFrame, error) {
	if r.node.cnk.Load() {
		return nil, fmt.Errorf("rank %d: traceback: %w", r.Num, cdti.ErrNotSupported) // unwound here
	}
	return r.node.client.Traceback(ctx, uint32(r.Num), uint32(lwp), 0)
}

func (b liveBackend) end(kill bool) {
	j := b.j
	if kill {
		j.Kill(5 * time.Second)
		j.CloseNodes(true)
	} else {
		j.Detach()
		j.CloseNodes(false)
	}
	if j.wlm != nil {
		j.wlm.End(kill)
	}
}

// End finishes with the job's processes: killed with kill, else left running untouched.
func (j *Job) End(kill bool) { j.back.end(kill) }

// ViewModules returns the modules of the rank the client looks at.
func (j *Job) ViewModules(ctx context.Context) ([]*symbols.Module, error) {
	return j.back.viewModules(ctx)
}

// Frozen says why the job's processes can neither run nor be changed (a core file), nil when
// they can.
func (j *Job) Frozen() error { return j.back.frozen() }

// ReadMemory reads up to count bytes at addr of the rank the client looks at.
func (j *Job) ReadMemory(ctx context.Context, addr uint64, count int) ([]byte, error) {
	return j.back.readMemory(ctx, addr, count)
}

// ViewProcess returns the process image of the rank the client looks at.
func (j *Job) ViewProcess(ctx context.Context) (*symbols.Process, error) {
	return j.back.viewProcess(ctx)
}
