//go:build linux && amd64

package ptrace

import (
	"fmt"

	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

// SetTrapHook installs h, called on the tracer's thread at each breakpoint trap of the
// process, right after the stop was reaped and its registers read (target.TrapHooker). A hit
// the hook passes costs the stop's system calls and none of the hand-offs between the
// tracer's thread and the consumer of the events.
func (p *process) SetTrapHook(h target.TrapHook) {
	p.t.call(func() error {
		p.hook = h
		return nil
	})
}

// hooked offers the breakpoint trap ev of th to the process's trap hook, and reports whether
// the hook resumed the thread (then nothing is reported). Runs on the tracer's thread.
func (t *Tracer) hooked(th *thread, ev *target.Event) bool {
	p := th.p
	if p.hook == nil || p.phase != phaseLive || th.injectSig != 0 {
		return false
	}
	resume := func(regs []byte) error {
		if len(regs) != gregsSize {
			return wrapErr("resume", p.obj(th.tid), nil, fmt.Errorf("%d bytes of registers, want %d: %w", len(regs), gregsSize, unix.EINVAL))
		}
		th.regsOK = false
		if err := setRegs(th.tid, target.RegsGeneral, regs); err != nil {
			return p.fail("set registers", th.tid, err)
		}
		if err := th.resume(0, false); err != nil {
			return p.fail("resume", th.tid, err)
		}
		return nil
	}
	t.inHook.Store(true)
	ok := p.hook(ev, p.pushed, resume)
	t.inHook.Store(false)
	if ok {
		t.passed = true
	}
	return ok
}
