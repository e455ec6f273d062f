package debugger

import (
	"bytes"
	"testing"
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
