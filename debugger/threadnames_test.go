package debugger

import (
	"reflect"
	"testing"

	"github.com/hpcdap/hpcdap/symbols"
)

// layout returns modules of one program's files, the libraries and the executable each moved
// by a delta of its own (what address-space randomisation does to a process).
func layout(libs, exe uint64) []*symbols.Module {
	mod := func(path string, bias, size uint64) *symbols.Module {
		return &symbols.Module{Path: path, Bias: bias, Lo: bias, Hi: bias + size}
	}
	return []*symbols.Module{
		mod("/prog", 0x555555554000+exe, 0x5000),
		mod("/lib/libc.so.6", 0x7ffff7d80000+libs, 0x1c8000),
		mod("/lib64/ld-linux-x86-64.so.2", 0x7ffff7fc3000+libs, 0x3a000),
	}
}

// TestLabelPlanRebased: the ranges the first rank's labelling read are replayed at another
// rank's addresses: those in a library or next to one (an anonymous mapping: a thread's
// descriptor) moved with the libraries, those of the executable with it, and a range whose
// module the other rank does not have is not read at all.
func TestLabelPlanRebased(t *testing.T) {
	lead := layout(0, 0)
	spans := []memSpan{
		{0x7ffff7fc3000 + 0x38000, 0x7ffff7fc3000 + 0x38200}, // ld.so's data
		{0x7ffff7d80000 - 0x3000, 0x7ffff7d80000 - 0x2c00},   // below libc: the main thread's descriptor
		{0x555555554000 + 0x4000, 0x555555554000 + 0x4200},   // the executable's data
		{0x7ffff7fc3000 + 0x3a000, 0x7ffff7fc3000 + 0x3a200}, // just past ld.so
	}
	p := &labelPlan{ready: make(chan struct{})}
	p.learned(lead, spans)
	p.learned(lead, nil) // once only
	const libs, exe = -0x12345000 & (1<<64 - 1), 0x1000000
	other := layout(uint64(libs), exe)
	other[0], other[2] = other[2], other[0] // the order of a module list is not the key
	want := []memSpan{
		{spans[0].lo + libs, spans[0].hi + libs},
		{spans[1].lo + libs, spans[1].hi + libs},
		{spans[2].lo + exe, spans[2].hi + exe},
		{spans[3].lo + libs, spans[3].hi + libs},
	}
	if got := p.rebased(other); !reflect.DeepEqual(got, want) {
		t.Errorf("rebased onto the libraries moved by %#x, the executable by %#x:\n got %x\nwant %x", uint64(libs), exe, got, want)
	}
	if got := p.rebased(lead); !reflect.DeepEqual(got, spans) {
		t.Errorf("rebased onto the same layout: %x, want %x", got, spans)
	}
	noLibc := []*symbols.Module{other[0], other[2]} // ld.so and the executable
	if got, want := p.rebased(noLibc), []memSpan{want[0], want[2], want[3]}; !reflect.DeepEqual(got, want) {
		t.Errorf("rebased onto a layout without libc: %x, want %x", got, want)
	}
}

// TestLabelPlanKey: ranks of the same files share a plan whatever their load addresses and
// the order of their module lists, and the first to ask leads it; other files, another plan.
func TestLabelPlanKey(t *testing.T) {
	var j Job
	p0, lead0 := j.labelPlan(layout(0, 0))
	moved := layout(0x10000000, 0x2000)
	moved[0], moved[1] = moved[1], moved[0]
	p1, lead1 := j.labelPlan(moved)
	if !lead0 || lead1 || p0 != p1 {
		t.Errorf("same files moved: plans %p, %p, leads %v, %v; want one plan, led by the first", p0, p1, lead0, lead1)
	}
	extra := append(layout(0, 0), &symbols.Module{Path: "/lib/libm.so.6", Bias: 0x7ffff7000000, Lo: 0x7ffff7000000, Hi: 0x7ffff7100000})
	if p2, lead2 := j.labelPlan(extra); p2 == p0 || !lead2 {
		t.Errorf("another set of files shares the plan (lead %v)", lead2)
	}
}

// TestRecordedKeepsUsedBlocks: what a labelling recorded is the blocks of its fetched pages
// that a read used, adjacent ones merged, not the pages.
func TestRecordedKeepsUsedBlocks(t *testing.T) {
	var m rankMemory
	m.recordFetches()
	page := make([]byte, pageSize)
	m.scratch = blocks{}
	m.scratch.put(0x10000, page)
	m.scratch.put(0x20000, page)
	m.rec = []memSpan{{0x10000, 0x10000 + pageSize}, {0x20000, 0x20000 + pageSize}}
	m.scratch.use(0x10000 + blockSize)
	m.scratch.use(0x10000 + 2*blockSize)
	m.scratch.use(0x10000 + 7*blockSize)
	m.scratch.use(0x20000)
	want := []memSpan{
		{0x10000 + blockSize, 0x10000 + 3*blockSize},
		{0x10000 + 7*blockSize, 0x10000 + 8*blockSize},
		{0x20000, 0x20000 + blockSize},
	}
	if got := m.recorded(); !reflect.DeepEqual(got, want) {
		t.Errorf("recorded %x, want %x", got, want)
	}
	if m.recording || m.rec != nil {
		t.Error("still recording after recorded")
	}
}
