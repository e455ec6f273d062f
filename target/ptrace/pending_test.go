package ptrace

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/procimage"
)

// A signal sent to a process in a job-control stop stays pending until it is continued:
// SignalPending sees it, and not another signal.
func TestSignalPending(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, err := procimage.ReadStatus(pid); err == nil && st.State == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep did not stop")
		}
	}
	if SignalPending(pid, syscall.SIGUSR1) {
		t.Fatal("SIGUSR1 pending before it was sent")
	}
	syscall.Kill(pid, syscall.SIGUSR1)
	if !SignalPending(pid, syscall.SIGUSR1) {
		t.Error("SIGUSR1 sent to a stopped process is not pending")
	}
	if SignalPending(pid, syscall.SIGUSR2) {
		t.Error("SIGUSR2 pending, never sent")
	}
	if SignalPending(1<<22, syscall.SIGUSR1) {
		t.Error("a signal pending for a process that does not exist")
	}
}
