package agent

import (
	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// evaluateValue answers EvaluateValue: the program, which the tool compiled for one place of
// the program (it unwinds from frame 0's registers and checks each frame's pc itself),
// evaluated in th and printed.
func (p *proc) evaluateValue(th *pthread, c *cdti.EvaluateValue) cdti.Result {
	tid := uint32(th.tid)
	f := bpcode.Format(c.Format)
	prog, err := bpcode.Decode(c.Program)
	if err != nil || f == bpcode.FmtText || bpcode.FormatValue(f, 0) == "" {
		return fail(cdti.CmdParmErr, tid)
	}
	var text string
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
		if err != nil {
			return cdti.CmdTIDinval
		}
		v, err := prog.Eval(&trapMachine{p: p, tid: th.tid, gp: regs}, c.Bias)
		if err != nil {
			return cdti.CmdParmErr
		}
		text = bpcode.FormatValue(f, v)
		if len(text) > cdti.MaxValueText {
			text = text[:cdti.MaxValueText]
		}
		return cdti.CmdSuccess
	})
	if code != cdti.CmdSuccess {
		return fail(code, tid)
	}
	return ok(&cdti.EvaluateValueAck{ThreadID: tid, Text: text})
}
