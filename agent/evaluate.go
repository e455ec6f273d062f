package agent

import (
	"fmt"

	"github.com/hpcdap/hpcdap/bpcode"
	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/target"
)

// evaluateValue answers EvaluateValue: the program, which the tool compiled for one place of
// the program (it unwinds from frame 0's registers and checks each frame's pc itself, relative
// to its modules' biases), evaluated in th and printed.
func (p *proc) evaluateValue(th *pthread, c *cdti.EvaluateValue) cdti.Result {
	tid := uint32(th.tid)
	f := bpcode.Format(c.Format)
	prog, err := bpcode.Decode(c.Program)
	if err != nil || !f.Valued() {
		return fail(cdti.CmdParmErr, tid)
	}
	var text string
	code := p.pause([]int{th.tid}, func() cdti.CmdReturnCode {
		regs, err := p.tp.Registers(th.tid, target.RegsGeneral)
		if err != nil {
			return cdti.CmdTIDinval
		}
		v, err := prog.Eval(&evalMachine{trapMachine: trapMachine{p: p, tid: th.tid, gp: regs}, names: c.Modules}, 0)
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

// evalMachine is a thread of a stopped process as an EvaluateValue program sees it: its
// registers and memory, and the load biases of the program's modules, from the process's link
// map, read at the first that the program asks for.
type evalMachine struct {
	trapMachine
	names  []string
	biases map[string]uint64
}

func (m *evalMachine) ModuleBias(i int) (uint64, error) {
	if i >= len(m.names) {
		return 0, fmt.Errorf("module %d of %d", i, len(m.names))
	}
	if m.biases == nil {
		b, err := m.p.moduleBiases()
		if err != nil {
			return 0, err
		}
		m.biases = b
	}
	b, ok := m.biases[m.names[i]]
	if !ok {
		return 0, fmt.Errorf("module %q is not loaded", m.names[i])
	}
	return b, nil
}
