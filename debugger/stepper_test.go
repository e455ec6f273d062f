package debugger

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
)

// TestRangeRefusal: of the answers to a StepRange, CmdInval alone (a CNK, an agent without the
// extension) means that the agent has no range steps; CmdParmErr (a StepRange it does not
// take) refuses that one step's range, and any other outcome is the step's own. The errors
// name the LWP, the command, and for a StepRange its range and budget.
func TestRangeRefusal(t *testing.T) {
	rng := &cdti.StepRange{ThreadID: 7, Lo: 0x401000, Hi: 0x401020, MaxSteps: maxSteps}
	for _, c := range []struct {
		err  error
		want rangeOutcome
		text string
	}{
		{&errStepRefused{lwp: 7, cmd: rng, code: cdti.CmdInval}, rangeUnknown, "step LWP 7: StepRange: the agent does not know it"},
		{&errStepRefused{lwp: 7, cmd: rng, code: cdti.CmdParmErr}, rangeRefused,
			"step LWP 7 through [0x401000, 0x401020), at most 2000 steps: CmdParmErr (5)"},
		{&errStepRefused{lwp: 7, cmd: rng, code: cdti.CmdTIDinval}, rangeOther,
			"step LWP 7 through [0x401000, 0x401020), at most 2000 steps: CmdTIDinval (1)"},
		{&errStepRefused{lwp: 7, cmd: &cdti.StepThread{ThreadID: 7}, code: cdti.CmdParmErr}, rangeOther, "step LWP 7: CmdParmErr (5)"},
		{fmt.Errorf("rank 3: %w", &errStepRefused{lwp: 7, cmd: rng, code: cdti.CmdParmErr}), rangeRefused, ""},
		{errors.New("the connection broke"), rangeOther, ""},
		{nil, rangeOther, ""},
	} {
		if got := rangeRefusal(c.err); got != c.want {
			t.Errorf("%v: %d, want %d", c.err, got, c.want)
		}
		if c.text != "" && c.err.Error() != c.text {
			t.Errorf("error %q, want %q", c.err, c.text)
		}
	}
}
