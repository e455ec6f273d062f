package agent

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/internal/testenv"
)

// Control with sndSignal SIGSTOP on a process already in a job-control stop (how slurmstepd
// holds a task at its exec: SIGSTOP, untraced) stops it and sends exactly one Notify. Then,
// either ContinueProcess puts it back into its job-control stop (nothing runs) until SIGCONT,
// which SendSignalToProcess delivers; or SIGCONT is sent while it is suspended (the launch
// flow for srun) and ContinueProcess lets it run. The tool then leaves it running, untouched.
func TestControlSignalInJobControlStop(t *testing.T) {
	for _, sigcontFirst := range []bool{false, true} {
		name := "continue-then-sigcont"
		if sigcontFirst {
			name = "sigcont-then-continue"
		}
		t.Run(name, func(t *testing.T) { controlInJobControlStop(t, sigcontFirst) })
	}
}

func controlInJobControlStop(t *testing.T, sigcontFirst bool) {
	h := newHarness(t, "")
	out := newOutFile(t)
	cmd := exec.Command(progBin, "run")
	cmd.Stdout, cmd.Stderr = out.f, out.f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out.waitFor(t, "pid ")
	pid := cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	deadline := time.Now().Add(10 * time.Second)
	for taskStates(t, pid)[pid] != 'T' {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not in a job-control stop: %v", pid, taskStates(t, pid))
		}
		time.Sleep(time.Millisecond)
	}
	if err := h.a.AttachRanks(map[uint32]int{0: pid}); err != nil {
		t.Fatal(err)
	}
	counter := testenv.NMSymbol(t, progBin, "counter")
	tt := h.dial(1)
	tt.attach(0, 99, "dbg")
	tt.control(0, int(syscall.SIGSTOP), cdti.DynamicNotifyDLoader)
	n := tt.signalNotify()
	if n.Signal != uint32(syscall.SIGSTOP) || n.ThreadID != uint32(pid) {
		t.Fatalf("notification %+v, want SIGSTOP of thread %d", n, pid)
	}
	if st := taskStates(t, pid)[pid]; st != 't' {
		t.Fatalf("state %c at the notification, want t", st)
	}
	tt.noNotify(200 * time.Millisecond) // exactly one
	c0 := le.Uint64(procMem(t, pid, counter, 8))
	if sigcontFirst {
		tt.mustUpdate(0, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGCONT)})
		tt.cont(0)
	} else {
		tt.cont(0)
		tt.noNotify(200 * time.Millisecond)
		if c1 := le.Uint64(procMem(t, pid, counter, 8)); c1 != c0 {
			t.Fatalf("counter moved from %d to %d after ContinueProcess: the job-control stop was lost", c0, c1)
		}
		tt.mustUpdate(0, &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGCONT)})
	}
	deadline = time.Now().Add(10 * time.Second)
	for le.Uint64(procMem(t, pid, counter, 8)) == c0 {
		if time.Now().After(deadline) {
			t.Fatalf("SIGCONT did not let the process run (states %v)", taskStates(t, pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	tt.mustUpdate(0, &cdti.ReleaseControl{})
	if _, err := tt.c.Detach(ctx(), 0, cdti.RankInHeader); err != nil {
		t.Fatal(err)
	}
	checkUntouched(t, pid)
}
