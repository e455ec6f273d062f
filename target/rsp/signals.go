package rsp

import (
	"fmt"
	"os"
	"syscall"

	"github.com/hpcdap/hpcdap/target"
)

// The protocol numbers signals its own way (gdb's signals.def), not as the target's kernel
// does: T1e is SIGUSR1 (30), not signal 30. These tables translate between the protocol and
// Linux numbering on Power (the generic Linux numbers).

// gdbSignals maps a protocol signal number to the Linux one.
var gdbSignals = map[int]int{
	1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, // HUP INT QUIT ILL TRAP ABRT
	8: 8, 9: 9, 10: 7, 11: 11, 12: 31, 13: 13, 14: 14, 15: 15, // FPE KILL BUS SEGV SYS PIPE ALRM TERM
	16: 23, 17: 19, 18: 20, 19: 18, 20: 17, 21: 21, 22: 22, 23: 29, // URG STOP TSTP CONT CHLD TTIN TTOU IO
	24: 24, 25: 25, 26: 26, 27: 27, 28: 28, 30: 10, 31: 12, 32: 30, // XCPU XFSZ VTALRM PROF WINCH USR1 USR2 PWR
}

// Protocol numbers of the real-time signals: 33–63 are 45–75, 32 is 77, 64–127 are 78–141.
const (
	gdbRealtime33 = 45
	gdbRealtime32 = 77
	gdbRealtime64 = 78
	gdbUnknown    = 143
)

// linuxSignals is the inverse of gdbSignals.
var linuxSignals = func() map[int]int {
	m := make(map[int]int, len(gdbSignals))
	for g, l := range gdbSignals {
		m[l] = g
	}
	return m
}()

// toLinuxSignal translates a protocol signal number to Linux's (0 stays 0; unknown numbers
// give -1).
func toLinuxSignal(g int) int {
	switch {
	case g == 0:
		return 0
	case g >= gdbRealtime33 && g <= gdbRealtime33+30:
		return 33 + g - gdbRealtime33
	case g == gdbRealtime32:
		return 32
	case g >= gdbRealtime64 && g <= gdbRealtime64+63:
		return 64 + g - gdbRealtime64
	}
	if l, ok := gdbSignals[g]; ok {
		return l
	}
	return -1
}

// toGDBSignal translates a Linux signal number to the protocol's.
func toGDBSignal(l int) int {
	switch {
	case l == 0:
		return 0
	case l >= 33 && l <= 63:
		return gdbRealtime33 + l - 33
	case l == 32:
		return gdbRealtime32
	case l >= 64 && l <= 127:
		return gdbRealtime64 + l - 64
	}
	if g, ok := linuxSignals[l]; ok {
		return g
	}
	return gdbUnknown // SIGSTKFLT (16) has no protocol number
}

// interruptSignal is the host signal that interrupts a launched QEMU.
func (p *Process) interruptSignal() os.Signal {
	if p.opts.InterruptSignal != nil {
		return p.opts.InterruptSignal
	}
	return syscall.SIGINT
}

// interruptStopSignal is the signal a stop caused by Interrupt reports: SIGINT for the
// interrupt byte, else the signal sent to the emulator (Options.InterruptSignal).
func (p *Process) interruptStopSignal() int {
	if p.caps.Interrupt == InterruptSignal {
		if s, ok := p.interruptSignal().(syscall.Signal); ok {
			return int(s)
		}
	}
	return sigINT
}

// signalEmulator sends sig to the emulator process (tid 0) or one of its threads: under QEMU
// user mode each program thread is a host thread with the same id.
func (p *Process) signalEmulator(tid int, sig os.Signal) error {
	if p.emu == nil || p.emu.Process == nil {
		return fmt.Errorf("rsp: signal %s: emulator not launched by this client: %w", p.obj(), target.ErrUnsupported)
	}
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("rsp: signal %s: %v is not a system signal", p.obj(), sig)
	}
	pid := p.emu.Process.Pid
	if tid == 0 {
		if err := syscall.Kill(pid, s); err != nil {
			return fmt.Errorf("rsp: signal %v to emulator %d: %w", s, pid, err)
		}
		return nil
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, tid)); err != nil {
		return fmt.Errorf("rsp: signal %v to thread %d: %w", s, tid, target.ErrNoThread)
	}
	if err := syscall.Tgkill(pid, tid, s); err != nil {
		return fmt.Errorf("rsp: signal %v to thread %d of emulator %d: %w", s, tid, pid, err)
	}
	return nil
}
