package cdti

import "errors"

// commands answers a Query or an Update: message-level checks in CNK's order, the commands the
// framework answers itself, the handler's results, and the ack budget.
func (c *Conn) commands(hd any, h Header, b []byte) (Message, error) {
	ackType := h.Type + 1
	if x, ok := hd.(Checker); ok {
		hc := h
		if rc := x.Check(c, &hc); rc != Success {
			return commandAck(h, ackType, rc, nil), nil
		}
	}
	if len(b) >= 42 && be.Uint16(b[40:]) > MaxCommands {
		return commandAck(h, ackType, ToolNumberOfCmdsExceeded, nil), nil
	}
	m, err := DecodeMessage(b)
	if err != nil {
		return nil, err
	}
	var cmds []Command
	switch r := m.(type) {
	case *Query:
		cmds = r.Commands
	case *Update:
		cmds = r.Commands
	}
	if h.Type == MsgUpdate {
		actions := 0
		for _, cmd := range cmds {
			if _, raw := cmd.(*RawCommand); !raw && cmd.CommandType().IsAction() {
				actions++
			}
		}
		if actions > 1 {
			return commandAck(h, ackType, ToolConflictingCmds, nil), nil
		}
	}

	// The framework's own answers; the handler sees those commands as *RawCommand.
	results := make([]Result, len(cmds))
	own := make([]bool, len(cmds))
	run := make([]Command, len(cmds))
	for i, cmd := range cmds {
		run[i] = cmd
		t := cmd.CommandType()
		if c.srv.CNK && t.IsExtension() {
			results[i], own[i] = Result{Code: CmdInval}, true
			run[i] = &RawCommand{Type: t, ThreadID: cmd.Thread(), Err: ErrUnknownCommand}
			continue
		}
		switch x := cmd.(type) {
		case *RawCommand:
			code := CmdParmErr
			if errors.Is(x.Err, ErrUnknownCommand) || errors.Is(x.Err, ErrWrongMessage) {
				code = CmdInval
			}
			results[i], own[i] = Result{Code: code}, true
		case *GetMemory:
			if x.Length > MaxMemorySize {
				results[i] = Result{Code: CmdLngthErr, Ack: &GetMemoryAck{ThreadID: x.ThreadID, Addr: x.Addr, Length: x.Length}}
				own[i] = true
				run[i] = &RawCommand{Type: t, ThreadID: x.ThreadID, Err: ErrMemoryTooLarge}
			}
		case *SetMemory:
			if len(x.Data) > MaxMemorySize {
				results[i], own[i] = Result{Code: CmdParmErr}, true
				run[i] = &RawCommand{Type: t, ThreadID: x.ThreadID, Err: ErrMemoryTooLarge}
			}
		}
	}

	var got []Result
	rc := Success
	if h.Type == MsgQuery {
		got, rc = hd.(QueryHandler).Query(c, &Query{Header: h, Commands: run})
	} else {
		got, rc = hd.(UpdateHandler).Update(c, &Update{Header: h, Commands: run})
	}
	if rc != Success {
		return commandAck(h, ackType, rc, nil), nil
	}
	for i := range results {
		if !own[i] {
			if i < len(got) {
				results[i] = got[i]
			} else {
				c.srv.logf("cdti: connection %d: %v handler returned %d results for %d commands", c.id, h.Type, len(got), len(cmds))
				results[i] = Result{Code: CmdInval}
			}
		}
		c.completeResult(&results[i], cmds[i])
	}
	fitResults(results)
	return commandAck(h, ackType, Success, results), nil
}

// completeResult sets the descriptor type and supplies the 8-byte ack where the handler gave
// none.
func (c *Conn) completeResult(r *Result, cmd Command) {
	want := cmd.CommandType().Ack()
	r.Type = want
	switch a := r.Ack.(type) {
	case nil:
		if r.Code != CmdAllocErr {
			r.Ack = &BareAck{Type: want, ThreadID: cmd.Thread()}
		}
	case *BareAck:
		a.Type = want
	case *RawAck:
	default:
		if a.CommandType() != want {
			c.srv.logf("cdti: connection %d: handler answered %v with %T", c.id, cmd.CommandType(), a)
			r.Code, r.Ack = CmdInval, &BareAck{Type: want, ThreadID: cmd.Thread()}
		}
	}
}

// fitResults applies CNK's ack buffer limit: an ack that does not fit in SmallMessageRegionSize
// bytes gets CmdAllocErr with no payload.
func fitResults(rs []Result) {
	end := CommandMessageSize
	for i := range rs {
		if rs[i].Ack == nil {
			continue
		}
		if n := round8(end) + rs[i].Ack.EncodedSize(); n <= SmallMessageRegionSize {
			end = n
		} else {
			rs[i].Code, rs[i].Ack = CmdAllocErr, nil
		}
	}
}

func commandAck(h Header, t MessageType, rc ReturnCode, rs []Result) Message {
	hd := h.Reply(rc)
	if t == MsgUpdateAck {
		return &UpdateAck{Header: hd, Results: rs}
	}
	return &QueryAck{Header: hd, Results: rs}
}
