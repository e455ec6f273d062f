package rsp

import (
	"errors"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
)

// usr1SpinSource spins until the debugger sets stop, handling SIGUSR1. It prints "spinning"
// once the handler is installed: QEMU ≥ 9 dies of a signal the program does not handle, so
// an interrupt must not come earlier.
const usr1SpinSource = `#include <signal.h>
#include <stdio.h>
volatile long count, handled, stop;
static void on_usr1(int s) { handled++; }
int main(void) {
	signal(SIGUSR1, on_usr1);
	puts("spinning");
	fflush(stdout);
	while (!stop) count++;
	return 0;
}
`

// TestInterruptWithChosenSignal interrupts a spinning program under QEMU ≥ 9 with the signal
// Options.InterruptSignal names (SIGUSR1, not SIGINT): each stop it causes is the interrupt
// (EventStopped), never a signal of the program's, and the program's handler never runs.
// SIGSTOP is refused by Kill: sent to QEMU it would stop the emulator, not the program, which
// keeps running.
func TestInterruptWithChosenSignal(t *testing.T) {
	a := archBE
	emu, modern := a.qemu(t)
	if !modern {
		t.Fatalf("%s: the test needs QEMU ≥ 9 (run scripts/qemu-user.sh)", emu)
	}
	exe := a.compile(t, "usr1spin", usr1SpinSource, "-O1")
	out := newOutputWaiter("spinning")
	p := launch(t, emu, []string{exe}, Options{InterruptSignal: syscall.SIGUSR1, Stdout: out})
	tid := leader(t, p)
	read := func(name string) uint64 {
		b := make([]byte, 8)
		if _, err := p.ReadMemory(testenv.ELFSymbol(t, exe, name).Value, b); err != nil {
			t.Fatal(err)
		}
		return a.order.Uint64(b)
	}
	for round := range 3 {
		if err := p.Resume(tid, 0); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			out.wait(t)
			if err := p.Kill(0, int(syscall.SIGSTOP)); !errors.Is(err, target.ErrUnsupported) {
				t.Fatalf("Kill SIGSTOP: %v, want ErrUnsupported", err)
			}
		}
		if err := p.Interrupt(tid); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, p); ev.Kind != target.EventStopped || ev.Tid != tid {
			t.Fatalf("round %d: event %+v, want EventStopped", round, ev)
		}
	}
	if read("handled") != 0 {
		t.Errorf("handled %d: the program's handler ran", read("handled"))
	}
	one := make([]byte, 8)
	a.order.PutUint64(one, 1)
	if _, err := p.WriteMemory(testenv.ELFSymbol(t, exe, "stop").Value, one); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(tid, 0); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, p); ev.Kind != target.EventExit || ev.Status != 0 {
		t.Fatalf("event %+v, want exit 0", ev)
	}
}
