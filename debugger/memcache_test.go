package debugger

import (
	"bytes"
	"testing"

	"github.com/hpcdap/hpcdap/cdti"
)

// TestBlocksTrimmed: trimming keeps exactly the blocks a read used, with their contents, in
// copies of their own (the page they came with is not kept through them), and put does not
// replace a cached block.
func TestBlocksTrimmed(t *testing.T) {
	page := make([]byte, pageSize)
	for i := range page {
		page[i] = byte(i / blockSize)
	}
	bs := blocks{}
	bs.put(0x10000, page)
	if len(bs) != pageSize/blockSize {
		t.Fatalf("%d blocks cached, want %d", len(bs), pageSize/blockSize)
	}
	if b := bs.use(0x10000 + 2*blockSize); b[0] != 2 {
		t.Fatalf("block 2 holds %d", b[0])
	}
	bs.use(0x10000 + 5*blockSize)
	kept := bs.trimmed()
	if len(kept) != 2 || !kept.has(0x10000+2*blockSize) || !kept.has(0x10000+5*blockSize) {
		t.Fatalf("kept %d blocks, want blocks 2 and 5", len(kept))
	}
	b := kept[0x10000+5*blockSize]
	if !bytes.Equal(b.data, bytes.Repeat([]byte{5}, blockSize)) || !b.own {
		t.Fatalf("block 5 after the trim: own %v, %x…", b.own, b.data[:4])
	}
	page[5*blockSize] = 99 // the page it came with is not the block's memory any more
	if kept[0x10000+5*blockSize].data[0] != 5 {
		t.Error("a kept block still shares the page it was read with")
	}
	other := bytes.Repeat([]byte{7}, pageSize)
	kept.put(0x10000, other)
	if kept.use(0x10000 + 2*blockSize)[0] != 2 {
		t.Error("put replaced a cached block")
	}
	if kept.use(0x10000)[0] != 7 {
		t.Error("put did not add a missing block")
	}
	if len(blocks{}.trimmed()) != 0 || (blocks)(nil).trimmed() != nil {
		t.Error("trimming no blocks kept some")
	}
}

// TestKeepChecksAddresses: what a command list read for spans (spanCommands' or a plan's) is
// kept in the transient cache only where each answer says it read the span's own address, in
// full: a span read whole in two pieces is kept, one the agent placed elsewhere (its module
// loaded at another address than the front end knows) or read short is not, an empty span
// has no commands, and nothing is kept once the cache was reset since the read began.
func TestKeepChecksAddresses(t *testing.T) {
	fill := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	read := func(addr uint64, data []byte) cdti.Result {
		return cdti.Result{Code: cdti.CmdSuccess, Ack: &cdti.GetModuleMemoryAck{Addr: addr, Length: uint32(len(data)), Data: data}}
	}
	spans := []memSpan{{0x1000, 0x1200}, {}, {0x3000, 0x3400}, {0x5000, 0x5200}, {0x7000, 0x7400}}
	res := []cdti.Result{
		{Code: cdti.CmdSuccess, Ack: &cdti.ListThreadsAck{}},
		read(0x1000, fill(512, 1)),
		read(0x3000, fill(512, 3)), {Code: cdti.CmdSuccess, Ack: &cdti.GetMemoryAck{Addr: 0x3200, Length: 512, Data: fill(512, 4)}},
		read(0x9000, fill(512, 5)),
		read(0x7000, fill(512, 7)), {Code: cdti.CmdParmErr, Ack: &cdti.BareAck{}},
	}
	at := []int{1, 2, 2, 4, 5}
	m := &rankMemory{}
	m.keep(m.currentEpoch(), spans, at, res)
	for a, want := range map[uint64]byte{0x1000: 1, 0x3000: 3, 0x3200: 4} {
		if !m.scratch.has(a) || !bytes.Equal(m.scratch.use(a), fill(blockSize, want)) {
			t.Errorf("block %#x not kept as read", a)
		}
	}
	for _, a := range []uint64{0, 0x5000, 0x9000, 0x7000, 0x7200} {
		if m.scratch.has(a) {
			t.Errorf("block %#x kept", a)
		}
	}
	stale := m.currentEpoch()
	m.reset()
	m.keep(stale, spans, at, res)
	if len(m.scratch) != 0 {
		t.Errorf("%d blocks kept after a reset", len(m.scratch))
	}
}
