package rsp

import (
	"bufio"
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestFraming checks frames against the protocol's worked examples: the checksum of
// "qSupported" and the run-length example from the GDB manual ("0* " is "0000").
func TestFraming(t *testing.T) {
	if got := string(appendFrame(nil, []byte("g"))); got != "$g#67" {
		t.Errorf("frame of g = %q", got)
	}
	if got := string(appendFrame(nil, []byte("OK"))); got != "$OK#9a" {
		t.Errorf("frame of OK = %q", got)
	}
	r := bufio.NewReader(strings.NewReader("junk+-$0* #" + hex2(checksum([]byte("0* "))) + "$bad#00%Stop:T05#" + hex2(checksum([]byte("Stop:T05")))))
	want := []struct {
		kind byte
		data string
	}{{'+', ""}, {'-', ""}, {'$', "0000"}, {frameBadSum, "bad"}, {'%', "Stop:T05"}}
	for _, w := range want {
		k, d, err := readFrame(r)
		if err != nil || k != w.kind || string(d) != w.data {
			t.Fatalf("readFrame = %q %q %v, want %q %q", k, d, err, w.kind, w.data)
		}
	}
	esc := escapeBinary(nil, []byte("a$b#c}d*e"))
	if string(esc) != "a}\x04b}\x03c}]d}\x0ae" {
		t.Errorf("escaped %q", esc)
	}
	if back, err := unescapeBinary(esc); err != nil || string(back) != "a$b#c}d*e" {
		t.Errorf("unescaped %q %v", back, err)
	}
}

func hex2(b byte) string { return string([]byte{hexDigits[b>>4], hexDigits[b&15]}) }

// TestStopReplies decodes the stop replies ppc64.md §4 records from QEMU.
func TestStopReplies(t *testing.T) {
	for _, c := range []struct {
		in   string
		want stopReply
	}{
		{"T05thread:p01.34a4;", stopReply{Kind: 'T', Signal: 5, Thread: threadID{1, 0x34a4}, HasThread: true}},
		{"T05thread:p7ac5.7ac5;", stopReply{Kind: 'T', Signal: 5, Thread: threadID{0x7ac5, 0x7ac5}, HasThread: true}},
		{"T1ethread:3a93;", stopReply{Kind: 'T', Signal: 30, Thread: threadID{0, 0x3a93}, HasThread: true}},
		{"T05watch:10000994;thread:p1.2;", stopReply{Kind: 'T', Signal: 5, Thread: threadID{1, 2}, HasThread: true, Watch: "watch", WatchAddr: 0x10000994}},
		{"T05swbreak:;thread:p1.2;", stopReply{Kind: 'T', Signal: 5, Thread: threadID{1, 2}, HasThread: true, SWBreak: true}},
		{"W00", stopReply{Kind: 'W'}},
		{"W01;process:1a", stopReply{Kind: 'W', Status: 1, Pid: 0x1a}},
		{"X05", stopReply{Kind: 'X', Signal: 5}},
		{"S0b", stopReply{Kind: 'S', Signal: 11}},
	} {
		got, err := parseStop([]byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		got.Regs = nil
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.in, got, c.want)
		}
	}
	r, err := parseStop([]byte("T05thread:p1.2;40:0000000010000994;"))
	if err != nil || !bytes.Equal(r.Regs[0x40], []byte{0, 0, 0, 0, 0x10, 0, 9, 0x94}) {
		t.Errorf("expedited pc: %v %v", r.Regs, err)
	}
	for _, notStop := range []string{"OK", "E14", "Text=0000000000000000;Data=0;Bss=0", "", "T", "7c0802a6", "l", "mp01.34a4"} {
		if isStopReply([]byte(notStop)) {
			t.Errorf("%q taken for a stop reply", notStop)
		}
	}
}

// TestSignalNumbers checks the protocol/Linux signal tables in both directions.
func TestSignalNumbers(t *testing.T) {
	for l := 1; l <= 64; l++ {
		g := toGDBSignal(l)
		if l == 16 { // SIGSTKFLT has no protocol number
			if g != gdbUnknown {
				t.Errorf("SIGSTKFLT -> %d", g)
			}
			continue
		}
		if back := toLinuxSignal(g); back != l {
			t.Errorf("Linux %d -> protocol %d -> Linux %d", l, g, back)
		}
	}
	// Values ppc64.md §4.8 measured: T02 SIGINT, T04 SIGILL, T05 SIGTRAP, T1e SIGUSR1.
	for g, l := range map[int]int{2: 2, 4: 4, 5: 5, 0x1e: 10, 10: 7, 11: 11, 12: 31} {
		if toLinuxSignal(g) != l {
			t.Errorf("protocol %d -> %d, want %d", g, toLinuxSignal(g), l)
		}
	}
}

// TestTargetDescriptionParsing parses a description with includes and implicit numbers.
func TestTargetDescriptionParsing(t *testing.T) {
	docs := map[string]string{
		"target.xml": `<?xml version="1.0"?><!DOCTYPE target SYSTEM "gdb-target.dtd">
<target><architecture>powerpc:common64</architecture><xi:include href="core.xml"/><xi:include href="fpu.xml"/></target>`,
		"core.xml": `<feature name="org.gnu.gdb.power.core"><reg name="r0" bitsize="64"/><reg name="r1" bitsize="64"/>
<reg name="pc" bitsize="64" regnum="64"/><reg name="cr" bitsize="32"/><reg name="lr" bitsize="64"/></feature>`,
		"fpu.xml": `<feature name="org.gnu.gdb.power.fpu"><reg name="f0" bitsize="64" regnum="71"/><reg name="fpscr" bitsize="32" group="float"/></feature>`,
	}
	d, err := parseTdesc("target.xml", func(a string) ([]byte, error) { return []byte(docs[a]), nil })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int{"r0": {0, 0}, "r1": {1, 8}, "pc": {64, 16}, "cr": {65, 24}, "lr": {66, 28}, "f0": {71, 36}, "fpscr": {72, 44}}
	for name, w := range want {
		r := d.reg(name)
		if r == nil || r.Num != w[0] || r.Offset != w[1] {
			t.Errorf("%s: %+v, want number %d offset %d", name, r, w[0], w[1])
		}
	}
	if d.Arch != "powerpc:common64" || d.reg("fpscr").Feature != "org.gnu.gdb.power.fpu" {
		t.Errorf("arch %q", d.Arch)
	}
	loop := func(a string) ([]byte, error) { return []byte(`<target><xi:include href="target.xml"/></target>`), nil }
	if _, err := parseTdesc("target.xml", loop); err == nil {
		t.Error("self-including description accepted")
	}
	for _, bad := range []string{`<target><reg bitsize="64"/></target>`, `<target><reg name="r0" bitsize="x"/></target>`, `<target>`, ``} {
		if _, err := parseTdesc("t", func(string) ([]byte, error) { return []byte(bad), nil }); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestProgramOf finds the program among QEMU options.
func TestProgramOf(t *testing.T) {
	for args, want := range map[string]string{
		"/bin/prog a b":                         "/bin/prog",
		"-L /sys -seed 1 prog x":                "prog",
		"-cpu power9 -E A=1 -one-insn-per-tb p": "p",
		"-strace -R 0x1000 p":                   "p",
	} {
		if got := programOf(strings.Fields(args)); got != want {
			t.Errorf("%q: %q, want %q", args, got, want)
		}
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader: it must return frames or an
// error, never panic, and a packet it accepts must survive re-framing.
func FuzzReadFrame(f *testing.F) {
	for _, s := range []string{"+$T05thread:p01.34a4;#45", "$T05thread:p657.659;#8a$T05thread:p657.65a;#b2",
		"$OK#9a", "$0* #" + hex2(checksum([]byte("0* "))), "-+\x03$E14#aa", "%Stop:W00#00", "$l<?xml?>#00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		for i := 0; i < 100; i++ {
			kind, data, err := readFrame(r)
			if err != nil {
				return
			}
			if kind == '$' && !bytes.ContainsAny(data, "$#") {
				k2, d2, err := readFrame(bufio.NewReader(bytes.NewReader(appendFrame(nil, data))))
				if err != nil || k2 != '$' || !bytes.Equal(d2, data) && !bytes.Contains(data, []byte("*")) {
					t.Fatalf("re-framed %q: %q %q %v", data, k2, d2, err)
				}
			}
		}
	})
}

// FuzzParseStop feeds arbitrary packets to the stop-reply decoder.
func FuzzParseStop(f *testing.F) {
	for _, s := range []string{"T05thread:p01.34a4;", "T05thread:p7ac5.7ac5;", "W00", "X05", "S0b", "W01;process:1a",
		"T05watch:10000994;thread:p1.2;", "T05thread:p1.2;40:0000000010000994;", "T05exec:2f62696e;"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !isStopReply(b) {
			return
		}
		_, _ = parseStop(b)
	})
}

// FuzzParseTdesc feeds arbitrary documents to the target-description parser.
func FuzzParseTdesc(f *testing.F) {
	f.Add([]byte(builtinPowerpc64))
	f.Add([]byte(`<target><xi:include href="x"/></target>`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseTdesc("target.xml", func(string) ([]byte, error) { return b, nil })
		if err == nil {
			for _, r := range d.Regs {
				if r.Size() <= 0 || r.Offset < 0 {
					t.Fatalf("register %+v", r)
				}
			}
		}
	})
}
