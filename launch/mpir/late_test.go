package mpir

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestAttachLateRacesBreakpoint: an attach to a running starter that polls
// MPIR_being_debugged (as BG/Q's runjob does) and calls MPIR_Breakpoint once it sees it set,
// while the attach, having had no hit for latePoll, stops the starter to read its table
// itself: the hit and the stop race. With latePoll as short as the starter's poll, each
// attach crosses the race many times; every one must find the table (the starter's child)
// and release the starter.
func TestAttachLateRacesBreakpoint(t *testing.T) {
	need(t, pollProg, agentBin)
	defer func(d time.Duration) { latePoll = d }(latePoll)
	latePoll = 5 * time.Millisecond
	for i := range 40 {
		cmd := exec.Command(pollProg, "5")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		a := attachAgent(t, cmd.Process.Pid)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, procs, err := Attach(ctx, a.client, Options{Exe: pollProg})
		if err != nil {
			cancel()
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("attach %d: %v", i, err)
		}
		if kids := children(cmd.Process.Pid); len(procs) != 1 || len(kids) != 1 || procs[0].Pid != kids[0] {
			t.Errorf("attach %d: table %+v, want the starter's child (children %v)", i, procs, kids)
		}
		if err := s.Release(ctx); err != nil {
			t.Errorf("attach %d: release: %v", i, err)
		}
		cancel()
		cmd.Process.Kill()
		cmd.Wait()
	}
}
