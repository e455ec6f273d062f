package cdti

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"sync"
)

// Hello authenticates the connection to an hpcdap agent. It must be the first request.
func (c *Client) Hello(ctx context.Context, token []byte) (*HelloAck, error) {
	fail := func(err error) (*HelloAck, error) {
		if errors.Is(err, ToolAuthorityError) {
			err = fmt.Errorf("%w: %w", ErrAuthentication, err)
		}
		return nil, &OpError{Op: "hello", Object: c.remote, Err: err}
	}
	ack, err := ProveHello(token, func(m *Hello) (*HelloAck, error) {
		reply, err := c.roundTrip(ctx, m)
		if err != nil {
			return nil, err
		}
		return reply.(*HelloAck), nil
	})
	if err != nil {
		if errors.Is(err, ErrAuthentication) {
			c.Close() // the agent did not prove the token: nothing more goes to it
		}
		return fail(err)
	}
	return ack, nil
}

// ProveHello is the tool's side of the Hello handshake, over exchange (one Hello sent, the
// agent's HelloAck read): the agent proves the session token first, over the tool's nonce, so
// that a listener without the token learns nothing from the tool; then the tool proves it
// over the agent's. It returns the agent's last ack. Client.Hello uses it, and so can a relay
// that authenticates a raw link.
func ProveHello(token []byte, exchange func(*Hello) (*HelloAck, error)) (*HelloAck, error) {
	mine := NewNonce()
	ch, err := exchange(&Hello{ExtVersion: ExtensionVersion, Nonce: mine})
	if err != nil {
		return nil, err
	}
	if len(ch.Nonce) != NonceSize || !hmac.Equal(ch.Proof, HelloProof(token, HelloRoleAgent, mine, ch.Nonce)) {
		return nil, fmt.Errorf("%w: the agent did not prove the session token", ErrAuthentication)
	}
	return exchange(&Hello{ExtVersion: ExtensionVersion, Proof: HelloProof(token, HelloRoleTool, ch.Nonce, mine)})
}

// Attach attaches the tool to header rank rank (RankInHeader) or to every rank of its node
// (RanksInNode), with a tag and a priority (0 query-only, 1…99).
func (c *Client) Attach(ctx context.Context, rank uint32, sel ProcessSelect, tag Tag, priority uint8) (*AttachAck, error) {
	reply, err := c.RoundTrip(ctx, &Attach{Header: Header{Rank: rank}, Tag: tag, Priority: priority, Select: sel})
	ack, _ := reply.(*AttachAck)
	return ack, err
}

// Detach detaches the tool from rank or from every rank of its node. Release control first.
func (c *Client) Detach(ctx context.Context, rank uint32, sel ProcessSelect) (*DetachAck, error) {
	reply, err := c.RoundTrip(ctx, &Detach{Header: Header{Rank: rank}, Select: sel})
	ack, _ := reply.(*DetachAck)
	return ack, err
}

// Control asks for control authority over rank's process with the settings of req (its header
// is ignored but for the fields RoundTrip fills). With ToolControlConflict the returned ack,
// which describes the holder, comes with the error.
func (c *Client) Control(ctx context.Context, rank uint32, req Control) (*ControlAck, error) {
	req.Header = Header{Rank: rank}
	reply, err := c.RoundTrip(ctx, &req)
	ack, _ := reply.(*ControlAck)
	return ack, err
}

// Query sends one Query with cmds (which must form a valid message: see Builder) and returns
// one Result per command. Per-command failures are in the Results, not in the error.
func (c *Client) Query(ctx context.Context, rank uint32, cmds ...Command) ([]Result, error) {
	rs, err := c.exchange(ctx, MsgQuery, rank, cmds)
	return rs, wrapOp("query", rank, err)
}

// Update sends one Update with cmds, like Query.
func (c *Client) Update(ctx context.Context, rank uint32, cmds ...Command) ([]Result, error) {
	rs, err := c.exchange(ctx, MsgUpdate, rank, cmds)
	return rs, wrapOp("update", rank, err)
}

// QueryBatch sends any number of query commands, split into valid messages by Batch and sent
// concurrently (one at a time with Serialize), and returns their results in order. On error it
// returns the results of the messages before the first one that failed.
func (c *Client) QueryBatch(ctx context.Context, rank uint32, cmds []Command) ([]Result, error) {
	rs, err := c.batch(ctx, MsgQuery, rank, cmds)
	return rs, wrapOp("query", rank, err)
}

// UpdateBatch sends any number of update commands, split into valid messages by Batch, one
// message at a time and in order (later commands may depend on earlier ones; an action command
// ends its message). It stops at the first message-level failure and returns the results so
// far.
func (c *Client) UpdateBatch(ctx context.Context, rank uint32, cmds []Command) ([]Result, error) {
	rs, err := c.batch(ctx, MsgUpdate, rank, cmds)
	return rs, wrapOp("update", rank, err)
}

func wrapOp(op string, rank uint32, err error) error {
	if err == nil {
		return nil
	}
	return &OpError{Op: op, Object: rankObject(rank), Err: err}
}

// exchange sends one Query or Update and checks that the ack answers it command for command.
func (c *Client) exchange(ctx context.Context, kind MessageType, rank uint32, cmds []Command) ([]Result, error) {
	var m Message
	if kind == MsgUpdate {
		m = &Update{Header: Header{Rank: rank}, Commands: cmds}
	} else {
		m = &Query{Header: Header{Rank: rank}, Commands: cmds}
	}
	reply, err := c.roundTrip(ctx, m)
	if err != nil {
		return nil, err
	}
	var rs []Result
	switch r := reply.(type) {
	case *QueryAck:
		rs = r.Results
	case *UpdateAck:
		rs = r.Results
	}
	if len(rs) != len(cmds) {
		return nil, fmt.Errorf("%w: %d results for %d commands", ErrMalformed, len(rs), len(cmds))
	}
	for i, r := range rs {
		if want := cmds[i].CommandType().Ack(); r.Type != want {
			return nil, fmt.Errorf("%w: result %d is %v, want %v", ErrMalformed, i, r.Type, want)
		}
	}
	return rs, nil
}

func (c *Client) batch(ctx context.Context, kind MessageType, rank uint32, cmds []Command) ([]Result, error) {
	batches, err := Batch(kind, cmds)
	if err != nil {
		return nil, err
	}
	results := make([][]Result, len(batches))
	errs := make([]error, len(batches))
	if kind == MsgQuery && !c.opts.Serialize && len(batches) > 1 {
		var wg sync.WaitGroup
		for i, b := range batches {
			wg.Go(func() { results[i], errs[i] = c.exchange(ctx, kind, rank, b) })
		}
		wg.Wait()
	} else {
		for i, b := range batches {
			if results[i], errs[i] = c.exchange(ctx, kind, rank, b); errs[i] != nil {
				break
			}
		}
	}
	var out []Result
	for i := range batches {
		if errs[i] != nil {
			return out, errs[i]
		}
		out = append(out, results[i]...)
	}
	return out, nil
}

// ReadMemory reads n bytes at addr in thread tid's view of rank's process (tid 0: the default
// thread), splitting the read into GetMemory commands and messages as needed. On a failure it
// returns the bytes read before the first failing chunk together with the error.
func (c *Client) ReadMemory(ctx context.Context, rank, tid uint32, addr uint64, n int, spec SpecAccess) ([]byte, error) {
	cmds := SplitGetMemory(tid, addr, n, spec)
	rs, err := c.batch(ctx, MsgQuery, rank, cmds)
	out := make([]byte, 0, n)
	for i, r := range rs {
		want := cmds[i].(*GetMemory)
		if r.Code != CmdSuccess {
			return out, wrapOp("read memory", rank, fmt.Errorf("%#x+%d: %w", want.Addr, want.Length,
				&CommandError{Index: i, Type: TypeGetMemory, Code: r.Code}))
		}
		a, ok := r.Ack.(*GetMemoryAck)
		if !ok || len(a.Data) != int(want.Length) {
			return out, wrapOp("read memory", rank, fmt.Errorf("%#x+%d: %w: short GetMemoryAck", want.Addr,
				want.Length, ErrMalformed))
		}
		out = append(out, a.Data...)
	}
	return out, wrapOp("read memory", rank, err)
}

// WriteMemory writes data at addr in rank's process, splitting the write into SetMemory
// commands and Update messages as needed (it needs control authority).
func (c *Client) WriteMemory(ctx context.Context, rank, tid uint32, addr uint64, data []byte, spec SpecAccess,
	shared SharedMemoryAccess) error {
	cmds := SplitSetMemory(tid, addr, data, spec, shared)
	rs, err := c.batch(ctx, MsgUpdate, rank, cmds)
	if err != nil {
		return wrapOp("write memory", rank, err)
	}
	return wrapOp("write memory", rank, firstFailure(cmds, rs))
}

// firstFailure returns a *CommandError for the first failed result, or nil.
func firstFailure(cmds []Command, rs []Result) error {
	for i, r := range rs {
		if r.Code != CmdSuccess {
			return &CommandError{Index: i, Type: cmds[i].CommandType(), Code: r.Code}
		}
	}
	return nil
}

// one sends a single command in its own message and returns its ack; an extension command
// answered with CmdInval gives ErrNotSupported.
func (c *Client) one(ctx context.Context, rank uint32, cmd Command) (Ack, error) {
	rs, err := c.exchange(ctx, cmd.CommandType().Kind(), rank, []Command{cmd})
	if err != nil {
		return nil, err
	}
	r := rs[0]
	if r.Code == CmdInval && cmd.CommandType().IsExtension() {
		return nil, fmt.Errorf("%v: %w", cmd.CommandType(), ErrNotSupported)
	}
	if r.Code != CmdSuccess {
		return nil, &CommandError{Type: cmd.CommandType(), Code: r.Code}
	}
	return r.Ack, nil
}

// oneAck is one with the ack asserted to its expected type.
func oneAck[T Ack](ctx context.Context, c *Client, op string, rank uint32, cmd Command) (T, error) {
	var zero T
	a, err := c.one(ctx, rank, cmd)
	if err != nil {
		return zero, wrapOp(op, rank, err)
	}
	t, ok := a.(T)
	if !ok {
		return zero, wrapOp(op, rank, fmt.Errorf("%w: %v answered with %T", ErrMalformed, cmd.CommandType(), a))
	}
	return t, nil
}

// ThreadList returns the threads of rank's process.
func (c *Client) ThreadList(ctx context.Context, rank uint32) ([]ThreadEntry, error) {
	a, err := oneAck[*GetThreadListAck](ctx, c, "thread list", rank, &GetThreadList{})
	if err != nil {
		return nil, err
	}
	return a.Threads, nil
}

// TargetInfo asks the agent what rank's process is (extension). A real BG/Q answers
// ErrNotSupported.
func (c *Client) TargetInfo(ctx context.Context, rank uint32) (*GetTargetInfoAck, error) {
	return oneAck[*GetTargetInfoAck](ctx, c, "target info", rank, &GetTargetInfo{})
}

// RegisterSet reads an architecture-native register set of thread tid (extension). If the set
// is larger than DefaultRegisterSetSize it asks again with MaxRegisterSetSize.
func (c *Client) RegisterSet(ctx context.Context, rank, tid uint32, set RegisterSet) ([]byte, error) {
	a, err := oneAck[*GetRegisterSetAck](ctx, c, "get registers", rank, &GetRegisterSet{ThreadID: tid, Set: set})
	if errors.Is(err, CmdLngthErr) {
		a, err = oneAck[*GetRegisterSetAck](ctx, c, "get registers", rank,
			&GetRegisterSet{ThreadID: tid, Set: set, MaxLength: MaxRegisterSetSize})
	}
	if err != nil {
		return nil, err
	}
	return a.Data, nil
}

// SetRegisterSet replaces an architecture-native register set of thread tid (extension; needs
// control authority).
func (c *Client) SetRegisterSet(ctx context.Context, rank, tid uint32, set RegisterSet, data []byte) error {
	_, err := oneAck[*SetRegisterSetAck](ctx, c, "set registers", rank,
		&SetRegisterSet{ThreadID: tid, Set: set, Data: data})
	return err
}

// Traceback asks the agent to unwind thread tid, up to maxFrames frames (0: the default)
// (extension).
func (c *Client) Traceback(ctx context.Context, rank, tid uint32, maxFrames int) ([]TraceFrame, error) {
	if maxFrames < 0 || maxFrames > MaxTracebackFrames {
		return nil, wrapOp("traceback", rank, fmt.Errorf("%d frames (limit %d)", maxFrames, MaxTracebackFrames))
	}
	a, err := oneAck[*GetTracebackAck](ctx, c, "traceback", rank, &GetTraceback{ThreadID: tid, MaxFrames: uint32(maxFrames)})
	if err != nil {
		return nil, err
	}
	return a.Frames, nil
}

// StopProcess stops every thread of rank's process without a signal (extension). It reports
// whether a Notify(SIGSTOP, SignalInterrupt) follows; false means a notification already on
// its way is the stop. A real BG/Q answers ErrNotSupported.
func (c *Client) StopProcess(ctx context.Context, rank uint32) (bool, error) {
	a, err := oneAck[*StopProcessAck](ctx, c, "stop", rank, &StopProcess{})
	if err != nil {
		return false, err
	}
	return a.Stopping, nil
}
