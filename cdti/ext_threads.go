package cdti

import "fmt"

// Extension command types of a thread list sized to its threads (see ListThreads).
const (
	TypeListThreads    CommandType = 1113
	TypeListThreadsAck CommandType = 1114
)

// listThreadsAckBase: thread id u32 @0, pad, entry count u32 @8 (at most MaxThreadIDs), pad,
// entries @16, 8 bytes each as GetThreadListAck's.
const listThreadsAckBase = 16

// ListThreads lists the process's threads as GetThreadList does, in an ack as long as its
// list: GetThreadListAck always takes 8 KiB, which a Collective that lists the threads of
// every rank of a set would carry for each rank, through every level of the tree.
type ListThreads struct{ ThreadID uint32 }

func (c *ListThreads) CommandType() CommandType { return TypeListThreads }
func (c *ListThreads) Thread() uint32           { return c.ThreadID }
func (c *ListThreads) EncodedSize() int         { return 8 }
func (c *ListThreads) AckSize() int             { return listThreadsAckBase + 8*MaxThreadIDs }
func (c *ListThreads) Encode(b []byte)          { be.PutUint32(b, c.ThreadID) }

func decListThreads(b []byte) (Command, error) {
	if err := need(TypeListThreads, b, 8); err != nil {
		return nil, err
	}
	return &ListThreads{ThreadID: be.Uint32(b)}, nil
}

// ListThreadsAck answers ListThreads: at most MaxThreadIDs threads are sent.
type ListThreadsAck struct {
	ThreadID uint32
	Threads  []ThreadEntry
}

func (a *ListThreadsAck) CommandType() CommandType { return TypeListThreadsAck }
func (a *ListThreadsAck) Thread() uint32           { return a.ThreadID }
func (a *ListThreadsAck) EncodedSize() int {
	return listThreadsAckBase + 8*min(len(a.Threads), MaxThreadIDs)
}

func (a *ListThreadsAck) Encode(b []byte) {
	be.PutUint32(b, a.ThreadID)
	ts := a.Threads[:min(len(a.Threads), MaxThreadIDs)]
	be.PutUint32(b[8:], uint32(len(ts)))
	putThreadEntries(b[listThreadsAckBase:], ts)
}

func decListThreadsAck(b []byte) (Ack, error) {
	if err := need(TypeListThreadsAck, b, listThreadsAckBase); err != nil {
		return nil, err
	}
	n := be.Uint32(b[8:])
	if n > MaxThreadIDs {
		return nil, fmt.Errorf("%v: %d threads (limit %d)", TypeListThreadsAck, n, MaxThreadIDs)
	}
	if err := need(TypeListThreadsAck, b, listThreadsAckBase+8*int(n)); err != nil {
		return nil, err
	}
	return &ListThreadsAck{ThreadID: be.Uint32(b), Threads: threadEntries(b[listThreadsAckBase:], int(n))}, nil
}

func init() {
	register(TypeListThreads, "ListThreads", MsgQuery, true, decListThreads, decListThreadsAck)
}
