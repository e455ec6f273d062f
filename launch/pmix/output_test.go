package pmix

import (
	"bytes"
	"testing"
)

func TestLabeller(t *testing.T) {
	var out, errs bytes.Buffer
	l := &labeller{stdout: &out, stderr: &errs}
	// Chunks split lines anywhere; lines of different ranks and streams do not mix.
	l.add(1, "prterun-vm-1@1", 3, []byte("hel"))
	l.add(1, "prterun-vm-1@1", 0, []byte("zero\nzero again\npart"))
	l.add(1, "prterun-vm-1@1", 3, []byte("lo\n"))
	l.add(2, "prterun-vm-1@1", 3, []byte("oops\n"))
	l.add(1, "job-without-at", 1, []byte("one\n"))
	if got, want := out.String(), "[1,0]<stdout>:zero\n[1,0]<stdout>:zero again\n[1,3]<stdout>:hello\n[job-without-at,1]<stdout>:one\n"; got != want {
		t.Errorf("stdout:\n%q\nwant\n%q", got, want)
	}
	if got, want := errs.String(), "[1,3]<stderr>:oops\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	// An unterminated last line is written at the flush.
	l.flush()
	if got, want := out.String()[len(out.String())-len("[1,0]<stdout>:part\n"):], "[1,0]<stdout>:part\n"; got != want {
		t.Errorf("after flush stdout ends %q, want %q", got, want)
	}
	l.flush()
	if bytes.Count(out.Bytes(), []byte("part")) != 1 {
		t.Errorf("a second flush wrote again: %q", out.String())
	}
}
