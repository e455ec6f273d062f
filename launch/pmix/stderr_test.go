//go:build cgo && pmix

package pmix

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestToolOutlivesItsStandardError: the tool's standard error is a pipe the front end reads.
// A front end killed leaves it without a reader, and the tool may write there (the ranks'
// standard error, labelled) before it has read the end of its input. Such a write must not
// end the tool: the launcher is its child, and the job would end with it. Here the pipe has no
// reader from the start, and the ranks write to standard error each second: the job runs to
// its end, the tool reports it, and the ranks' standard output is all in the output file.
func TestToolOutlivesItsStandardError(t *testing.T) {
	ranks, _ := buildPrograms(t)
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	reqR, reqW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer reqW.Close()
	evR, evW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer evR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR.Close() // the front end that read it is gone
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), toolEnv+"=serve", "TMPDIR="+dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = reqR, out, errW
	cmd.ExtraFiles = []*os.File{evW}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reqR.Close()
	evW.Close()
	errW.Close()
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()

	req, _ := json.Marshal(Request{Op: OpLaunch, Seq: 1, Launcher: launcher(t, "prterun"), Args: launchArgs,
		Program: ranks, ProgramArgs: []string{"0", "2", "stderr"}})
	if _, err := reqW.Write(append(req, '\n')); err != nil {
		t.Fatal(err)
	}
	events := make(chan Event)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(evR)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			var ev Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	var ready *Event
	timeout := time.After(2 * time.Minute)
	for end := false; !end; {
		select {
		case ev, ok := <-events:
			switch {
			case !ok:
				<-exited
				t.Fatalf("the tool ended before the job: %v", waitErr)
			case ev.Ev == EvReady:
				ready = &ev
			case ev.Ev == EvError || ev.Ev == EvLost:
				t.Fatalf("event %+v", ev)
			case ev.Ev == EvEnd:
				if ev.Status != 0 {
					t.Fatalf("the job ended with status %d, want 0", ev.Status)
				}
				end = true
			}
		case <-timeout:
			t.Fatal("the job did not end")
		}
	}
	if ready == nil {
		t.Fatal("the job ended unreported as ready")
	}
	reqW.Close() // the end of input: the tool ends
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("tool: %v", waitErr)
		}
	case <-time.After(time.Minute):
		t.Fatal("the tool did not end at the end of its input")
	}
	b, _ := os.ReadFile(out.Name())
	for _, p := range ready.Procs {
		if line := "<stdout>:rank " + strconv.Itoa(p.Rank) + " of 4"; !strings.Contains(string(b), line) {
			t.Errorf("output file lacks %q:\n%s", line, b)
		}
	}
}
