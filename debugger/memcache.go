package debugger

// The per-stop memory cache keeps a rank's memory in blocks of blockSize bytes, fetched a page
// (pageSize) or more at a time: one CDTI round trip serves the many small reads of an unwind
// or of a variable's evaluation. Once a thread's stack is unwound the blocks no read touched
// are dropped (blocks.trimmed): a stopped rank keeps what its stack and variables read, not every
// page around them, which matters for the front end's memory with thousands of stopped ranks.

// pageSize is how much memory a missing block fetches: the page around it.
const pageSize = 4096

// blockSize is the granule the cache keeps.
const blockSize = 512

// block is one cached block and whether a read used it since it was fetched.
type block struct {
	data []byte // blockSize bytes (only readable blocks are cached)
	used bool
	own  bool // data is a copy of its own, not part of the page it was read with
}

// blocks maps block-aligned addresses to cached blocks.
type blocks map[uint64]block

// has reports whether the block at a is cached.
func (bs blocks) has(a uint64) bool {
	_, ok := bs[a]
	return ok
}

// put caches the blocks of data, read at the block-aligned address lo, that are not cached
// yet (ones a write patched, or that a read used, stay); a partial block at the end is left
// out.
func (bs blocks) put(lo uint64, data []byte) {
	for off := 0; off+blockSize <= len(data); off += blockSize {
		if a := lo + uint64(off); !bs.has(a) {
			bs[a] = block{data: data[off : off+blockSize : off+blockSize]}
		}
	}
}

// use returns the contents of the block at a, marking it used.
func (bs blocks) use(a uint64) []byte {
	b, ok := bs[a]
	if !ok {
		return nil
	}
	if !b.used {
		b.used = true
		bs[a] = b
	}
	return b.data
}

// trimmed returns the blocks a read used, each with its own copy, so that the pages they were
// fetched with (and the map's room for the others) can be freed.
func (bs blocks) trimmed() blocks {
	var out blocks
	for a, b := range bs {
		if !b.used {
			continue
		}
		if out == nil {
			out = blocks{}
		}
		if b.data != nil && !b.own {
			b.data, b.own = append(make([]byte, 0, blockSize), b.data...), true
		}
		out[a] = b
	}
	return out
}
