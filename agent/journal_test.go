package agent

import (
	"fmt"
	"strings"
	"testing"
)

// The supervisor's side of the trap journal keeps the traps planted and not cleared, with
// their latest original bytes; a malformed record is reported and changes nothing.
func TestTrapJournalRead(t *testing.T) {
	tj := NewTrapJournal()
	var w strings.Builder
	j := &journal{w: &w}
	j.trap(10, 0x401000, []byte{0x55})
	j.trap(10, 0x401010, []byte{0x48})
	j.trap(11, 0x401000, []byte{0x55})
	j.clear(10, 0x401010)
	j.trap(11, 0x401000, []byte{0x90}) // a write under the trap changed its original
	in := w.String() + "trap 12 0x10\ntrap x 0x10 55\nclear 12\nbogus 1 2 3\ntrap 13 0x10 zz\n"
	err := tj.Read(strings.NewReader(in))
	if err == nil || strings.Count(err.Error(), "bad record") != 5 {
		t.Errorf("Read: %v, want the five malformed records named", err)
	}
	got := fmt.Sprint(tj.Planted())
	if want := "[{10 4198400 [85]} {11 4198400 [144]}]"; got != want {
		t.Errorf("planted %s, want %s", got, want)
	}
	var nilJournal *journal
	nilJournal.trap(1, 2, []byte{3}) // an agent without a journal writes nothing
}
