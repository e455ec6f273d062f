package agent

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// CallFunction runs a function of the program in the notified thread: its effect stays, the
// thread's register sets are as before, no notification is sent, and the program runs on. A
// call that faults reports the signal and where, restored; bad arguments are refused.
func TestCallFunction(t *testing.T) {
	h := newHarness(t, "")
	h.spawn(1, progBin, "loop", "2")
	tt, _ := startStopped(t, h, 1)
	hit := testenv.NMSymbol(t, progBin, "hit")
	counter := testenv.NMSymbol(t, progBin, "counter")
	tt.setBreak(0, hit)
	tt.cont(0)
	tt.signalNotify()
	gp := tt.regs(0, 0)
	fp, err := tt.c.RegisterSet(ctx(), 0, 0, cdti.RegSetFloat)
	if err != nil {
		t.Fatal(err)
	}
	count := le.Uint64(tt.memory(0, counter, 8))

	// hit(1000) has a breakpoint at its first instruction, which the call passes over.
	ack, err := tt.c.CallFunction(ctx(), 0, &cdti.CallFunction{Entry: hit, Args: []cdti.CallArg{{Kind: cdti.CallInt, Value: 1000}}})
	if err != nil || ack.Outcome != cdti.CallReturned {
		t.Fatalf("CallFunction hit(1000): %+v, %v", ack, err)
	}
	if got := le.Uint64(tt.memory(0, counter, 8)); got != count+1000 {
		t.Errorf("counter %d after hit(1000), was %d", got, count)
	}
	// A call at an unmapped address faults: SIGSEGV there, reported and undone.
	ack, err = tt.c.CallFunction(ctx(), 0, &cdti.CallFunction{Entry: 0x10})
	if err != nil || ack.Outcome != cdti.CallSignaled || ack.Signal != uint32(syscall.SIGSEGV) || ack.PC != 0x10 {
		t.Errorf("CallFunction at 0x10: %+v, %v", ack, err)
	}
	for _, bad := range []*cdti.CallFunction{
		{Entry: 0},
		{Entry: hit, Return: 7},
		{Entry: hit, Args: []cdti.CallArg{{Kind: 0}}},
		{Entry: hit, TimeoutMS: cdti.MaxCallTimeoutMS + 1},
	} {
		if r := tt.update(0, bad)[0]; r.Code != cdti.CmdParmErr {
			t.Errorf("CallFunction %+v: %v, want CmdParmErr", bad, r.Code)
		}
	}
	if after := tt.regs(0, 0); !bytes.Equal(after, gp) {
		t.Errorf("general registers changed by the calls")
	}
	if after, _ := tt.c.RegisterSet(ctx(), 0, 0, cdti.RegSetFloat); !bytes.Equal(after, fp) {
		t.Errorf("floating-point registers changed by the calls")
	}
	select {
	case n := <-tt.c.Notifications():
		t.Errorf("notification during the calls: %+v", n)
	default:
	}
	// The program goes on: the breakpoint at hit stops it again, then it ends.
	tt.cont(0)
	if n := tt.signalNotify(); n.Reason != cdti.SignalBreakpoint || n.InstAddress != hit {
		t.Errorf("after the calls: %+v, want the breakpoint at hit", n)
	}
	tt.mustUpdate(0, &cdti.ResetBreakpoint{Addr: hit, Instruction: uint32(origByte(t, progBin, hit))})
	tt.cont(0)
	if st := tt.waitTermination(0); st.ExitCode() != 0 {
		t.Errorf("exit %v", st)
	}
}
