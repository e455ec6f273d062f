package adapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/launch"
)

// Real messages as VS Code sends them, the seeds of the decoders' fuzz targets.
var seedMessages = []string{
	`{"command":"initialize","arguments":{"clientID":"vscode","clientName":"Visual Studio Code","adapterID":"hpcdap","pathFormat":"path","linesStartAt1":true,"columnsStartAt1":true,"supportsVariableType":true,"supportsVariablePaging":true,"supportsRunInTerminalRequest":true,"locale":"en","supportsProgressReporting":true,"supportsInvalidatedEvent":true,"supportsMemoryReferences":true,"supportsArgsCanBeInterpretedByShell":true,"supportsMemoryEvent":true,"supportsStartDebuggingRequest":true,"supportsANSIStyling":true},"type":"request","seq":1}`,
	`{"command":"launch","arguments":{"type":"hpcdap","request":"launch","name":"ring","program":"/tmp/ring","np":4,"args":["/tmp"],"__configurationTarget":6,"__sessionId":"0f1c"},"type":"request","seq":2}`,
	`{"command":"setBreakpoints","arguments":{"source":{"name":"ring.c","path":"/src/ring.c"},"lines":[126],"breakpoints":[{"line":126,"condition":"rank == 3","hitCondition":">= 2"}],"sourceModified":false},"type":"request","seq":3}`,
	`{"command":"setDataBreakpoints","arguments":{"breakpoints":[{"dataId":"m:/tmp/stacks:4010:4:counter","accessType":"write"}]},"type":"request","seq":4}`,
	`{"command":"dataBreakpointInfo","arguments":{"variablesReference":1001,"name":"counter","bytes":4,"asAddress":false},"type":"request","seq":5}`,
	`{"command":"stackTrace","arguments":{"threadId":1,"startFrame":0,"levels":20},"type":"request","seq":6}`,
	`{"command":"evaluate","arguments":{"expression":"s->corner[1]","frameId":1003,"context":"hover"},"type":"request","seq":7}`,
	`{"command":"disconnect","arguments":{"restart":false,"terminateDebuggee":false},"type":"request","seq":8}`,
	`{"command":"hpcdap/parallelStacks","arguments":{"ranks":"0-3","maxFrames":8},"type":"request","seq":9}`,
	`{"command":"hpcdap/compareExpression","arguments":{"expression":"local","frameLevel":1},"type":"request","seq":10}`,
	`{"seq":11,"type":"response","request_seq":3,"command":"runInTerminal","success":true}`,
}

func FuzzDecode(f *testing.F) {
	for _, s := range seedMessages {
		f.Add([]byte(s))
	}
	// A command seen before, then with what breaks go-dap's decoding of it.
	f.Add([]byte(`{"command":"threads","type":"request","seq":12}`))
	f.Add([]byte(`{"command":"threads","type":"request","seq":13,"success":"yes"}`))
	f.Add([]byte(`{"command":"threads","type":"request","seq":14,"event":1}`))
	f.Add([]byte(`{"command":"stackTrace","arguments":{"threadId":"1"},"type":"request","seq":15}`))
	f.Add([]byte(`{"command":"stackTrace","arguments":[],"type":"request","seq":16}`))
	c := newCodec()
	for _, s := range seedMessages {
		c.decode([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, derr := c.decode(b)
		if derr != nil && m != nil {
			t.Fatalf("both a message and an error")
		}
		if derr != nil && derr.msg == "" {
			t.Fatalf("error without a message")
		}
		// c has decoded other messages before (it decodes a command it has seen in one
		// pass): it answers as a codec that has seen none.
		fm, fderr := newCodec().decode(b)
		if !reflect.DeepEqual(m, fm) || !reflect.DeepEqual(derr, fderr) {
			t.Fatalf("%s: decoded as %#v, %v after other messages; %#v, %v first", b, m, derr, fm, fderr)
		}
	})
}

func FuzzFrameReader(f *testing.F) {
	for _, s := range seedMessages {
		f.Add([]byte(fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(s), s)))
	}
	f.Add([]byte("Content-Length: 99999999999\r\n\r\n{}"))
	f.Add([]byte("Content-Type: x\r\nContent-Length: 2\r\n\r\n{}Content-Length: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := newFrameReader(bytes.NewReader(b))
		for range 1000 {
			body, err := fr.read()
			var fe *frameError
			switch {
			case err == nil:
				if len(body) > MaxMessageSize {
					t.Fatalf("body of %d bytes passed the bound", len(body))
				}
			case errors.As(err, &fe):
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, errStreamBroken):
				return
			default:
				return
			}
		}
	})
}

func FuzzLaunchArgs(f *testing.F) {
	f.Add([]byte(`{"program":"/bin/true","np":4,"ranks":"0-3 8","stopMode":"rank","env":{"A":"1","B":null}}`))
	f.Add([]byte(`{"program":"/bin/true","launcher":"srun","launcherArgs":["-N2"]}`))
	f.Add([]byte(`{"pids":{"0":1,"1":2},"stopMode":"thread"}`))
	f.Add([]byte(`{"program":"/bin/true","launcher":"mpirun","np":16,"launcherArgs":["--oversubscribe"],"ranks":"0-3"}`))
	f.Add([]byte(`{"launcherPid":1,"stopAtEntry":true}`))
	f.Add([]byte(`{"slurmJob":"1234.0","ranks":"1-$max:2"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := planLaunch(b); err == nil && (p.program == "" || (p.launcher == "" && p.np < 1) || p.np < 0) {
			t.Fatalf("accepted plan %+v", p)
		}
		if a, err := planAttach(b); err == nil && a.slurmJob != "" && !launch.IsSlurmStep(a.slurmJob) {
			t.Fatalf("accepted Slurm step %q", a.slurmJob)
		}
	})
}

// TestDecodeSeeds: every seed decodes to the request it names.
func TestDecodeSeeds(t *testing.T) {
	t.Parallel()
	c := newCodec()
	for _, s := range seedMessages {
		var env struct {
			Type    string `json:"type"`
			Command string `json:"command"`
		}
		json.Unmarshal([]byte(s), &env)
		m, derr := c.decode([]byte(s))
		if env.Type == "response" {
			if m != nil || derr != nil {
				t.Errorf("response decoded as %T %v", m, derr)
			}
			continue
		}
		if derr != nil {
			t.Errorf("%s: %v", env.Command, derr)
			continue
		}
		if got := fmt.Sprintf("%T", m); !strings.Contains(strings.ToLower(got), strings.ToLower(strings.TrimPrefix(env.Command, "hpcdap/"))) {
			t.Errorf("%s decoded as %s", env.Command, got)
		}
	}
}
