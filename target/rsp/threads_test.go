package rsp

import (
	"bytes"
	"errors"
	"os/exec"
	"sort"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/target"
)

// threadsSource starts two threads that record their kernel thread ids and wait; main records
// its own and calls checkpoint() twice once both are up. Only main can hit the breakpoint.
const threadsSource = `#include <pthread.h>
#include <unistd.h>
#include <sys/syscall.h>
volatile int ready, stop;
long tids[3];
static void *worker(void *arg) {
	long i = (long)arg;
	tids[i] = syscall(SYS_gettid);
	__atomic_add_fetch(&ready, 1, __ATOMIC_SEQ_CST);
	while (!stop) usleep(1000);
	return 0;
}
__attribute__((noinline)) void checkpoint(void) { __asm__ volatile("" ::: "memory"); }
int main(void) {
	pthread_t t[2];
	tids[0] = syscall(SYS_gettid);
	for (long i = 1; i <= 2; i++) pthread_create(&t[i - 1], 0, worker, (void *)i);
	while (ready < 2) usleep(1000);
	checkpoint();
	checkpoint();
	stop = 1;
	for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
	return 0;
}
`

// TestThreads stops a three-thread program at a breakpoint and checks the thread list against
// the ids the threads recorded themselves (gettid), the new-thread events, and per-thread
// registers: each thread's r13 locates its own glibc thread descriptor, whose tid field holds
// that thread's id (ppc64.md §5.4).
func TestThreads(t *testing.T) {
	for _, a := range []crossArch{archBE, archLE} {
		t.Run(a.name, func(t *testing.T) {
			emu, _ := a.qemu(t)
			exe := a.compile(t, "threads", threadsSource, "-O1", "-pthread")
			p := launch(t, emu, []string{exe}, Options{Trace: traceOut()})
			main := leader(t, p)
			addr := resolve(t, exe, "checkpoint")
			orig := make([]byte, 4)
			if _, err := p.ReadMemory(addr, orig); err != nil {
				t.Fatal(err)
			}
			if _, err := p.WriteMemory(addr, p.Info().Arch.BreakInstr); err != nil {
				t.Fatal(err)
			}
			if err := p.Resume(main, 0); err != nil {
				t.Fatal(err)
			}
			ev := next(t, p)
			if ev.Kind != target.EventSignal || ev.Trap != target.TrapBreakpoint || ev.PC != addr || ev.Tid != main {
				t.Fatalf("event %+v, want main (%d) at checkpoint %#x", ev, main, addr)
			}
			ths, err := p.Threads()
			if err != nil {
				t.Fatal(err)
			}
			raw := make([]byte, 24)
			if _, err := p.ReadMemory(testenv.ELFSymbol(t, exe, "tids").Value, raw); err != nil {
				t.Fatal(err)
			}
			var want []int
			for i := 0; i < 3; i++ {
				want = append(want, int(a.order.Uint64(raw[8*i:])))
			}
			if len(ths) != 3 || ths[0] != want[0] || ths[0] != main {
				t.Fatalf("threads %v, the program recorded %v (main first)", ths, want)
			}
			got := append([]int(nil), ths...)
			sort.Ints(got)
			sort.Ints(want)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("threads %v, the program recorded %v", got, want)
				}
			}
			for i := 0; i < 2; i++ {
				nev := next(t, p)
				if nev.Kind != target.EventNewThread || nev.Tid == main {
					t.Fatalf("event %+v, want a new thread", nev)
				}
			}
			for _, tid := range ths {
				regs, err := p.Registers(tid, target.RegsGeneral)
				if err != nil {
					t.Fatal(err)
				}
				r13 := a.order.Uint64(regs[13*8:])
				field := make([]byte, 4)
				if _, err := p.ReadMemory(r13-0x77c0+208, field); err != nil {
					t.Fatal(err)
				}
				if got := int(a.order.Uint32(field)); got != tid {
					t.Errorf("thread %d: r13 %#x: descriptor tid %d", tid, r13, got)
				}
			}
			// Step main off the trap, resume everyone, and stop at the second call.
			if _, err := p.WriteMemory(addr, orig); err != nil {
				t.Fatal(err)
			}
			if err := p.Step(main, 0); err != nil {
				t.Fatal(err)
			}
			if sev := next(t, p); sev.Trap != target.TrapStep || sev.Tid != main {
				t.Fatalf("event %+v, want main's step", sev)
			}
			if _, err := p.WriteMemory(addr, p.Info().Arch.BreakInstr); err != nil {
				t.Fatal(err)
			}
			for _, tid := range ths {
				if err := p.Resume(tid, 0); err != nil {
					t.Fatal(err)
				}
			}
			if ev := next(t, p); ev.Trap != target.TrapBreakpoint || ev.Tid != main || ev.PC != addr {
				t.Fatalf("event %+v, want main at checkpoint again", ev)
			}
			// The workers were not reported stopped: to the agent they run.
			if err := p.Resume(ths[2], 0); !errors.Is(err, target.ErrRunning) {
				t.Fatalf("Resume of a thread not reported stopped: %v, want ErrRunning", err)
			}
			if err := p.Interrupt(ths[1]); err != nil {
				t.Fatal(err)
			}
			if sev := next(t, p); sev.Kind != target.EventStopped || sev.Tid != ths[1] {
				t.Fatalf("event %+v, want thread %d stopped", sev, ths[1])
			}
			if _, err := p.Registers(ths[1], target.RegsGeneral); err != nil {
				t.Fatal(err)
			}
			if _, err := p.WriteMemory(addr, orig); err != nil {
				t.Fatal(err)
			}
			for _, tid := range ths[:2] {
				if err := p.Resume(tid, 0); err != nil {
					t.Fatal(err)
				}
			}
			if xev := next(t, p); xev.Kind != target.EventExit || xev.Status != 0 {
				t.Fatalf("event %+v, want exit 0", xev)
			}
			if _, ok := <-p.Events(); ok {
				t.Fatal("events go on after the exit")
			}
		})
	}
}

// signalsSource raises signals one after the other, then faults. It handles every signal it
// raises: QEMU ≥ 9 user mode dies of an unhandled asynchronous signal without telling the
// debugger (only synchronous faults are reported then).
const signalsSource = `#include <signal.h>
volatile int handled;
static void on_signal(int s) { handled++; }
int main(void) {
	int sigs[] = {SIGUSR1, SIGUSR2, SIGALRM, SIGHUP, SIGPIPE, SIGBUS, SIGSYS, SIGTERM, SIGRTMIN + 1, SIGRTMIN + 6};
	int n = sizeof sigs / sizeof sigs[0];
	for (int i = 0; i < n; i++) signal(sigs[i], on_signal);
	for (int i = 0; i < n; i++) raise(sigs[i]);
	*(volatile int *)(16 + handled) = 1;
	return 0;
}
`

// TestSignals checks that stop replies translate the protocol's signal numbers into Linux's:
// the program raises signals in a known order, each suppressed on resume, then faults at
// address 16 and is killed by delivering the SIGSEGV.
func TestSignals(t *testing.T) {
	a := archBE
	emu, _ := a.qemu(t)
	exe := a.compile(t, "signals", signalsSource, "-O1")
	p := launch(t, emu, []string{exe}, Options{Trace: traceOut()})
	tid := leader(t, p)
	sigrtmin := 34 // glibc's SIGRTMIN: two real-time signals are kept for itself
	want := []int{10, 12, 14, 1, 13, 7, 31, 15, sigrtmin + 1, sigrtmin + 6}
	for _, w := range want {
		if err := p.Resume(tid, 0); err != nil {
			t.Fatal(err)
		}
		ev := next(t, p)
		if ev.Kind != target.EventSignal || ev.Signal != w || ev.Tid != tid {
			t.Fatalf("event %+v, want signal %d", ev, w)
		}
	}
	if err := p.Resume(tid, 0); err != nil {
		t.Fatal(err)
	}
	ev := next(t, p)
	if ev.Kind != target.EventSignal || ev.Signal != int(syscall.SIGSEGV) {
		t.Fatalf("event %+v, want SIGSEGV", ev)
	}
	if p.xfer["siginfo"] {
		if ev.Addr != 16 || ev.Code != 1 { // SEGV_MAPERR
			t.Errorf("SIGSEGV: addr %#x code %d, want 16 and SEGV_MAPERR", ev.Addr, ev.Code)
		}
	} else {
		t.Logf("the stub offers no siginfo (%s): fault address not checked", p.Capabilities().EmulatorVersion)
	}
	if err := p.Resume(tid, int(syscall.SIGSEGV)); err != nil {
		t.Fatal(err)
	}
	ev = next(t, p)
	if ev.Kind != target.EventExit || ev.Status&0x7f != int(syscall.SIGSEGV) {
		t.Fatalf("event %+v, want death by SIGSEGV", ev)
	}
}

// spinSource spins until the debugger sets stop; with a SIGINT handler when asked to. It
// prints "spinning" once the handler is installed and the loop about to start.
const spinSource = `#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
volatile long count, handled, stop;
static void on_int(int s) { handled++; }
int main(int argc, char **argv) {
	if (argc > 1) signal(SIGINT, on_int);
	puts("spinning");
	fflush(stdout);
	while (!stop) count++;
	return 0;
}
`

// TestInterrupt interrupts a spinning program. QEMU 7.2 stops on SIGINT; QEMU ≥ 9 dies of
// signals the program does not handle, so there the program installs a handler and the
// client is told to use SIGINT. The signal must stop the program without reaching it.
// Without that option Interrupt must refuse, and Kill must end the program.
func TestInterrupt(t *testing.T) {
	a := archBE
	emu, modern := a.qemu(t)
	exe := a.compile(t, "spin", spinSource, "-O1")
	out := newOutputWaiter("spinning")
	args, o := []string{exe}, Options{Stdout: out}
	if modern {
		args = append(args, "handler")
		o.InterruptSignal = syscall.SIGINT
	}
	p := launch(t, emu, args, o)
	if p.Capabilities().Interrupt != InterruptSignal {
		t.Fatalf("interrupt method %v", p.Capabilities().Interrupt)
	}
	tid := leader(t, p)
	if err := p.Resume(tid, 0); err != nil {
		t.Fatal(err)
	}
	out.wait(t) // the handler is installed: a signal before it would end the program
	if _, err := p.ReadMemory(testenv.ELFSymbol(t, exe, "count").Value, make([]byte, 8)); !errors.Is(err, target.ErrRunning) {
		t.Fatalf("read while running: %v, want ErrRunning", err)
	}
	if err := p.Interrupt(tid); err != nil {
		t.Fatal(err)
	}
	ev := next(t, p)
	if ev.Kind != target.EventStopped || ev.Tid != tid {
		t.Fatalf("event %+v, want EventStopped", ev)
	}
	read := func(name string) uint64 {
		b := make([]byte, 8)
		if _, err := p.ReadMemory(testenv.ELFSymbol(t, exe, name).Value, b); err != nil {
			t.Fatal(err)
		}
		return a.order.Uint64(b)
	}
	if read("handled") != 0 {
		t.Errorf("handled %d: the interrupt's signal reached the program", read("handled"))
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

	if !modern {
		return
	}
	// QEMU ≥ 9 without a signal to use: Interrupt refuses; Kill still works.
	p2 := launch(t, emu, []string{exe}, Options{})
	if p2.Capabilities().Interrupt != InterruptNone || len(p2.Notes()) == 0 {
		t.Fatalf("interrupt method %v, notes %q", p2.Capabilities().Interrupt, p2.Notes())
	}
	tid = leader(t, p2)
	if err := p2.Resume(tid, 0); err != nil {
		t.Fatal(err)
	}
	if err := p2.Interrupt(tid); !errors.Is(err, target.ErrUnsupported) {
		t.Fatalf("Interrupt: %v, want ErrUnsupported", err)
	}
	if err := p2.Kill(0, int(syscall.SIGKILL)); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, p2); ev.Kind != target.EventExit || ev.Status&0x7f != int(syscall.SIGKILL) {
		t.Fatalf("event %+v, want death by SIGKILL", ev)
	}
}

// TestTextWriteFallback runs the breakpoint loop on the system's QEMU. On QEMU 7.2, which
// cannot write text, the trap word must be carried out as a stub breakpoint: reads show it,
// hits are reported as breakpoints at its address, and writing the original word removes it.
func TestTextWriteFallback(t *testing.T) {
	a := archBE
	sys := "/usr/bin/qemu-" + a.name
	version, err := emulatorVersion(sys)
	if err != nil {
		t.Fatalf("%v: install the Debian package qemu-user", err)
	}
	exe := a.compile(t, "loop", loopSource, "-O0")
	var out bytes.Buffer
	p := launch(t, sys, []string{exe}, Options{Stdout: &out})
	if p.Capabilities().TextWrites {
		t.Logf("%s writes text itself: no fallback to test", version)
		return
	}
	addr := resolve(t, exe, "add")
	orig := make([]byte, 4)
	if _, err := p.ReadMemory(addr, orig); err != nil {
		t.Fatal(err)
	}
	trap := p.Info().Arch.BreakInstr
	if n, err := p.WriteMemory(addr, trap); err != nil || n != 4 {
		t.Fatalf("write trap: %d, %v", n, err)
	}
	got := make([]byte, 4)
	if _, err := p.ReadMemory(addr, got); err != nil || !bytes.Equal(got, trap) {
		t.Fatalf("read back % x, %v; want the trap % x", got, err, trap)
	}
	if !p.Capabilities().StubBreakpoints || len(p.Notes()) == 0 {
		t.Fatalf("capabilities %+v, notes %q", p.Capabilities(), p.Notes())
	}
	if _, err := p.WriteMemory(addr, orig); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadMemory(addr, got); err != nil || !bytes.Equal(got, orig) {
		t.Fatalf("after removal read % x, %v; want % x", got, err, orig)
	}
	hits := breakLoop(t, p, addr, 1000)
	if _, err := p.WriteMemory(addr, orig); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(leader(t, p), 0); err != nil {
		t.Fatal(err)
	}
	ev := next(t, p)
	p.Wait()
	if ev.Kind != target.EventExit || ev.Status != 0 || hits != 1000 || out.String() != loopOutput {
		t.Fatalf("%d hits, then %+v, output %q", hits, ev, out.String())
	}
	t.Logf("%s: trap words carried out as Z0; %d hits; notes: %q", version, hits, p.Notes())
}

// TestDial connects to an emulator started outside the client, detaches (the program then
// runs to its end on its own), and kills a second one through the protocol.
func TestDial(t *testing.T) {
	a := archBE
	emu, modern := a.qemu(t)
	exe := a.compile(t, "loop", loopSource, "-O0")
	start := func() (*exec.Cmd, string) {
		addr, cmd := testenv.StartQEMUStubTCP(t, exec.Command(emu, exe))
		return cmd, addr
	}
	cmd, addr := start()
	p, err := DialWith(addr, Options{Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	info := p.Info()
	if info.ByteOrder != a.order || info.Exe != exe || p.Capabilities().Interrupt != InterruptNone {
		t.Fatalf("info %+v, caps %+v", info, p.Capabilities())
	}
	if modern && info.Pid != cmd.Process.Pid { // QEMU ≥ 9 sends the real pid in thread ids
		t.Errorf("pid %d, emulator %d", info.Pid, cmd.Process.Pid)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("program after detach: %v", err)
	}
	if _, ok := <-p.Events(); ok {
		t.Fatal("events after detach")
	}

	_, addr = start()
	p, err = Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(0, int(syscall.SIGKILL)); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, p); ev.Kind != target.EventExit || ev.Status != int(syscall.SIGKILL) {
		t.Fatalf("event %+v, want death by SIGKILL", ev)
	}
	if _, err := p.ReadMemory(0x10000000, make([]byte, 4)); !errors.Is(err, target.ErrExited) {
		t.Errorf("read after kill: %v, want ErrExited", err)
	}
}
