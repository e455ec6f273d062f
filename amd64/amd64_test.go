//go:build linux && amd64

package amd64

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
)

var (
	buildOnce sync.Once
	buildErr  error
	binDir    string
)

// program returns the path of testdata/name.c built by gcc with flags (built once per run).
func program(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "amd64-test")
		for _, p := range []struct {
			name  string
			flags []string
		}{{"layout", nil}, {"calls", []string{"-O2"}}, {"fault", []string{"-O0", "-g"}}} {
			args := append(append([]string{}, p.flags...), "-o", filepath.Join(binDir, p.name),
				filepath.Join("testdata", p.name+".c"))
			if buildErr == nil {
				buildErr = testenv.Build("gcc", "gcc", args...)
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// TestLayoutMatchesHeaders checks every offset and size the package states against the C
// library headers, compiled by gcc: user_regs_struct, user_fpregs_struct, and the system-call
// numbers.
func TestLayoutMatchesHeaders(t *testing.T) {
	out, err := exec.Command(program(t, "layout")).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		n, err := strconv.Atoi(f[1])
		if len(f) != 2 || err != nil {
			t.Fatalf("layout program printed %q", line)
		}
		got[f[0]] = n
	}
	want := map[string]int{
		"r15": OffR15, "r14": OffR14, "r13": OffR13, "r12": OffR12, "rbp": OffRBP, "rbx": OffRBX,
		"r11": OffR11, "r10": OffR10, "r9": OffR9, "r8": OffR8, "rax": OffRAX, "rcx": OffRCX,
		"rdx": OffRDX, "rsi": OffRSI, "rdi": OffRDI, "orig_rax": OffOrigRAX, "rip": OffRIP,
		"cs": OffCS, "eflags": OffEFLAGS, "rsp": OffRSP, "ss": OffSS, "fs_base": OffFSBase,
		"gs_base": OffGSBase, "ds": OffDS, "es": OffES, "fs": OffFS, "gs": OffGS,
		"user_regs_struct": UserRegsSize, "ftw": OffFTW, "mxcsr": OffMXCSR, "st_space": OffST0, "xmm_space": OffXMM0,
		"st_slot": STSlot, "xmm_slot": XMMSize, "user_fpregs_struct": FPRegsSize,
		"SYS_mmap": SysMmap, "SYS_munmap": SysMunmap, "SYS_futex": SysFutex,
	}
	want["SYS_rt_sigreturn"] = SysRtSigreturn
	want["uc_mcontext.gregs"] = UcontextGregs
	// The signal frame's register words by DWARF number: REG_<name> is the word of the
	// register the psABI numbers dwarf.
	for name, dwarf := range map[string]int{"R8": DwarfR8, "R9": DwarfR8 + 1, "R10": DwarfR8 + 2,
		"R11": DwarfR8 + 3, "R12": DwarfR8 + 4, "R13": DwarfR8 + 5, "R14": DwarfR8 + 6, "R15": DwarfR8 + 7,
		"RDI": DwarfRDI, "RSI": DwarfRSI, "RBP": DwarfRBP, "RBX": DwarfRBX, "RDX": DwarfRDX,
		"RAX": DwarfRAX, "RCX": DwarfRCX, "RSP": DwarfRSP, "RIP": DwarfRIP} {
		i := slices.Index(GregsDWARF[:], dwarf)
		if i < 0 {
			t.Errorf("GregsDWARF has no word for %s", name)
		}
		want["REG_"+name] = i
	}
	if len(got) != len(want)+1 {
		t.Errorf("layout program printed %d values, the test checks %d", len(got), len(want)+1)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: package says %d, headers say %d (printed: %v)", k, v, g, ok)
		}
	}
	if !IsRestartCode(-int64(got["EINTR"])) {
		t.Errorf("-EINTR (%d) is not a restart code", -got["EINTR"])
	}
}

// objdumpLine is one instruction of `objdump -d -w`: address, bytes, mnemonic and operands.
var objdumpLine = regexp.MustCompile(`^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(\S+)\s*(.*)$`)

// objdumpInsn is one instruction as objdump lists it.
type objdumpInsn struct {
	addr               uint64
	code               []byte
	mnemonic, operands string
}

// objdumpText lists the instructions of exe's .text as objdump (at path objdump) reads them.
func objdumpText(t *testing.T, objdump, exe string) []objdumpInsn {
	t.Helper()
	out, err := exec.Command(objdump, "-d", "-w", "-j", ".text", exe).Output()
	if err != nil {
		t.Fatalf("objdump %s: %v", exe, err)
	}
	var insts []objdumpInsn
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := objdumpLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		code, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(m[2]), " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := strconv.ParseUint(m[1], 16, 64)
		insts = append(insts, objdumpInsn{addr, code, m[3], m[4]})
	}
	return insts
}

// TestDecodeMatchesObjdump decodes every instruction of a gcc-built program's .text and
// compares length and call-ness with GNU objdump's reading of the same bytes.
func TestDecodeMatchesObjdump(t *testing.T) {
	objdump := testenv.NeedTool(t, "objdump", "binutils")
	insts, calls, viaReg, viaMem := 0, 0, 0, 0
	for _, in := range objdumpText(t, objdump, program(t, "calls")) {
		code, mnemonic, ops, pc := in.code, in.mnemonic, in.operands, in.addr
		if mnemonic == "(bad)" {
			continue
		}
		insts++
		isCall := strings.HasPrefix(mnemonic, "call")
		call, n, err := DecodeCall(code)
		if err != nil {
			t.Errorf("%x: %x (%s): %v", pc, code, mnemonic, err)
			continue
		}
		if n != len(code) || call != isCall {
			t.Errorf("%x: %x (%s %s): decoded length %d call %v, objdump length %d call %v",
				pc, code, mnemonic, ops, n, call, len(code), isCall)
		}
		target, direct := CallTarget(code, pc)
		if isCall && !strings.HasPrefix(ops, "*") {
			// A direct call: objdump prints its target first ("1139 <f>").
			want, err := strconv.ParseUint(strings.Fields(ops)[0], 16, 64)
			if err != nil || !direct || target != want {
				t.Errorf("%x: %x (%s %s): call target %#x (%v), objdump %#x", pc, code, mnemonic, ops, target, direct, want)
			}
		} else if direct {
			t.Errorf("%x: %x (%s %s): a direct call target %#x, objdump shows none", pc, code, mnemonic, ops, target)
		}
		if isCall {
			calls++
			switch {
			case strings.HasPrefix(ops, "*%"):
				viaReg++
			case strings.HasPrefix(ops, "*"):
				viaMem++
			}
		}
		text, tn, err := Disassemble(code, pc, nil)
		if err != nil || tn != len(code) {
			t.Errorf("%x: disassemble %x: %q, %d bytes, %v", pc, code, text, tn, err)
		}
	}
	if insts < 50 || calls < 4 || viaReg+viaMem == 0 {
		t.Fatalf("objdump listed %d instructions, %d calls (%d through a register, %d through memory): the program does not exercise the decoder", insts, calls, viaReg, viaMem)
	}
}

// gdbFault runs the fault program under gdb and returns the registers, the 16 bytes at the
// pc and the faulting address as the kernel reported them in siginfo.
func gdbFault(t *testing.T, kind string) (map[string]uint64, []byte, uint64) {
	t.Helper()
	gdb := testenv.NeedTool(t, "gdb", "gdb")
	cmd := exec.Command(gdb, "-batch", "-nx", "-ex", "set startup-with-shell off", "-ex", "run",
		"-ex", "info registers", "-ex", "p/x $fs_base", "-ex", "p/x $gs_base", "-ex", "x/16xb $pc",
		"-ex", "p/x $_siginfo._sifields._sigfault.si_addr", "--args", program(t, "fault"), kind)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	regs := map[string]uint64{}
	var code []byte
	var prints []uint64
	reg := regexp.MustCompile(`^([a-z0-9_]+)\s+0x([0-9a-f]+)\s`)
	val := regexp.MustCompile(`^\$\d+ = 0x([0-9a-f]+)$`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := reg.FindStringSubmatch(line); m != nil {
			regs[m[1]], _ = strconv.ParseUint(m[2], 16, 64)
		}
		if m := val.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseUint(m[1], 16, 64)
			prints = append(prints, v)
		}
		if _, bytes, ok := strings.Cut(line, ":\t0x"); ok && strings.HasPrefix(line, "0x") {
			for _, b := range strings.Split("0x"+bytes, "\t") {
				v, err := strconv.ParseUint(strings.TrimSpace(b), 0, 8)
				if err == nil {
					code = append(code, byte(v))
				}
			}
		}
	}
	if len(prints) != 3 || len(code) != 16 || regs["rip"] == 0 {
		t.Fatalf("gdb output not understood (%d values, %d code bytes):\n%s", len(prints), len(code), out)
	}
	regs["fs_base"], regs["gs_base"] = prints[0], prints[1]
	return regs, code, prints[2]
}

// TestAccessAddressMatchesKernel lets a program fault on memory operands of each addressing
// kind and checks that AccessAddress, given the registers in user_regs_struct form, finds the
// address the kernel reported.
func TestAccessAddressMatchesKernel(t *testing.T) {
	offs := map[string]int{"rax": OffRAX, "rbx": OffRBX, "rcx": OffRCX, "rdx": OffRDX,
		"rsi": OffRSI, "rdi": OffRDI, "rbp": OffRBP, "rsp": OffRSP, "r8": OffR8, "r9": OffR9,
		"r10": OffR10, "r11": OffR11, "r12": OffR12, "r13": OffR13, "r14": OffR14, "r15": OffR15,
		"rip": OffRIP, "eflags": OffEFLAGS, "fs_base": OffFSBase, "gs_base": OffGSBase}
	for _, kind := range []string{"sib", "neg", "fs", "rip", "moffs"} {
		t.Run(kind, func(t *testing.T) {
			regs, code, addr := gdbFault(t, kind)
			gp := make([]byte, UserRegsSize)
			for name, off := range offs {
				v, ok := regs[name]
				if !ok {
					t.Fatalf("gdb did not show %s", name)
				}
				binary.LittleEndian.PutUint64(gp[off:], v)
			}
			got, ok := AccessAddress(code, regs["rip"], gp)
			if !ok || got != addr {
				t.Errorf("AccessAddress = %#x, %v; the kernel reported %#x", got, ok, addr)
			}
			if _, ok := AccessAddress(code, regs["rip"], gp[:UserRegsSize-8]); ok {
				t.Error("AccessAddress accepted a short register set")
			}
		})
	}
}

// TestRestoreRTMatchesLibc stops a program in a signal handler under gdb and reads the code
// the handler returns to: the C library's restorer, which must be RestoreRT.
func TestRestoreRTMatchesLibc(t *testing.T) {
	gdb := testenv.NeedTool(t, "gdb", "gdb")
	out, err := exec.Command(gdb, "-batch", "-nx", "-ex", "set startup-with-shell off",
		"-ex", "handle SIGUSR1 nostop noprint pass", "-ex", "break on_signal", "-ex", "run",
		"-ex", "frame 1", "-ex", fmt.Sprintf("x/%dxb $pc", len(RestoreRT)),
		"--args", program(t, "fault"), "signal").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "<signal handler called>") {
		t.Fatalf("gdb did not show a signal frame:\n%s", out)
	}
	var code []byte
	for _, line := range strings.Split(string(out), "\n") {
		if _, bytes, ok := strings.Cut(line, ":\t0x"); ok && strings.HasPrefix(line, "0x") {
			for _, b := range strings.Split("0x"+bytes, "\t") {
				if v, err := strconv.ParseUint(strings.TrimSpace(b), 0, 8); err == nil {
					code = append(code, byte(v))
				}
			}
		}
	}
	if !slices.Equal(code, RestoreRT) {
		t.Errorf("the restorer is % x, RestoreRT % x:\n%s", code, RestoreRT, out)
	}
}

// transferPrefixes are the prefixes objdump prints as a mnemonic of their own before the
// instruction they modify.
var transferPrefixes = map[string]bool{"bnd": true, "notrack": true, "rep": true, "repz": true, "repnz": true,
	"lock": true, "data16": true, "cs": true, "ds": true, "es": true, "fs": true, "gs": true, "ss": true}

// transferMnemonic matches objdump's mnemonics of the instructions that do not always fall
// through to the next: jumps, calls, returns, loops, system calls, interrupts and traps, the
// instructions that stop the processor or the program, and a transaction's begin, end and
// abort.
var transferMnemonic = regexp.MustCompile(`^(j[a-z]+|call[a-z]*|ret[a-z]*|lret[a-z]*|loop[a-z]*|syscall|sysenter|sysexit[a-z]*|sysret[a-z]*|int[0-9a-z]*|iret[a-z]*|hlt|ud[0-2]|xbegin|xabort|xend)$`)

// TestFallsThroughMatchesObjdump checks Decode's lengths and FallsThrough on every
// instruction of a gcc-built program's .text and of the C library's against objdump: each
// instruction is decoded where it lies, followed by the bytes after it (as a walk reads code),
// must have objdump's length, and falls through unless objdump names a transfer of control.
// An instruction the decoder does not know never falls through (a walk single-steps it); such
// instructions are counted, not compared.
func TestFallsThroughMatchesObjdump(t *testing.T) {
	objdump := testenv.NeedTool(t, "objdump", "binutils")
	for _, exe := range []string{program(t, "calls"), "/lib/x86_64-linux-gnu/libc.so.6"} {
		lines := objdumpText(t, objdump, exe)
		insts, transfers, unknown := 0, map[bool]int{}, 0
		for i, l := range lines {
			if l.mnemonic == "(bad)" {
				continue
			}
			// The instruction and what follows it in the section, as far as it is contiguous.
			stream := append([]byte(nil), l.code...)
			for j := i + 1; j < len(lines) && len(stream) < MaxInstLen+1 && lines[j].addr == l.addr+uint64(len(stream)); j++ {
				stream = append(stream, lines[j].code...)
			}
			mnemonic, rest := l.mnemonic, strings.Fields(l.operands)
			for transferPrefixes[mnemonic] && len(rest) > 0 {
				mnemonic, rest = rest[0], rest[1:]
			}
			inst, err := Decode(stream)
			if err != nil {
				unknown++
				if FallsThrough(inst, stream) {
					t.Errorf("%s %x: %x (%s %s) undecoded (%v) but falls through", exe, l.addr, l.code, l.mnemonic, l.operands, err)
				}
				continue
			}
			if inst.Len != len(l.code) {
				t.Errorf("%s %x: %x (%s %s) decoded from % x as %d bytes long", exe, l.addr, l.code, l.mnemonic, l.operands, stream, inst.Len)
				continue
			}
			insts++
			transfer := transferMnemonic.MatchString(mnemonic)
			transfers[transfer]++
			if FallsThrough(inst, stream) == transfer {
				t.Errorf("%s %x: %x (%s %s): falls through %v, objdump names a transfer %v", exe, l.addr, l.code, l.mnemonic, l.operands, !transfer, transfer)
			}
		}
		t.Logf("%s: %d instructions, %d transfers, %d the decoder does not know", exe, insts, transfers[true], unknown)
		if insts < 50 || transfers[true] < 10 || transfers[false] < 10 {
			t.Fatalf("%s: objdump listed %d instructions (%d transfers): too few to check", exe, insts, transfers[true])
		}
	}
}

// TestFallsThroughRare checks FallsThrough on instructions compilers rarely emit, by their
// bytes: those that transfer control or trap, and some that look as if they might but fall
// through.
func TestFallsThroughRare(t *testing.T) {
	for _, c := range []struct {
		code  []byte
		falls bool
		what  string
	}{
		{[]byte{0xf1}, false, "int1"},
		{[]byte{0xcc}, false, "int3"},
		{[]byte{0xcd, 0x80}, false, "int $0x80"},
		{[]byte{0x0f, 0x05}, false, "syscall"},
		{[]byte{0x0f, 0x0b}, false, "ud2"},
		{[]byte{0xf4}, false, "hlt"},
		{[]byte{0x8e, 0xd0}, false, "mov %eax,%ss"},
		{[]byte{0xe2, 0xfe}, false, "loop"},
		{[]byte{0xe3, 0xfe}, false, "jrcxz"},
		{[]byte{0xff, 0xe0}, false, "jmp *%rax"},
		{[]byte{0x3e, 0xff, 0xe0}, false, "notrack jmp *%rax"},
		{[]byte{0xf2, 0xc3}, false, "bnd ret"},
		{[]byte{0x48, 0xcf}, false, "iretq"},
		{[]byte{0xc7, 0xf8, 0, 0, 0, 0}, false, "xbegin"},
		{[]byte{0x0f, 0x01, 0xd5}, false, "xend"},
		{[]byte{0x0f, 0x01, 0xc1}, false, "vmcall (not decoded)"},
		{[]byte{0xf3, 0xa4}, true, "rep movsb"},
		{[]byte{0x9d}, true, "popfq"},
		{[]byte{0xf3, 0x0f, 0x1e, 0xfa}, true, "endbr64"},
		{[]byte{0x0f, 0x01, 0xd6}, true, "xtest"},
		{[]byte{0x8c, 0xd0}, true, "mov %ss,%eax"},
		{[]byte{0xc5, 0xf8, 0x77, 0xc3}, true, "vzeroupper (then ret)"},
		{[]byte{0xc4, 0xe1, 0x7c, 0x77, 0xe8}, true, "vzeroall, 3-byte VEX (then call)"},
	} {
		inst, _ := Decode(c.code)
		if got := FallsThrough(inst, c.code); got != c.falls {
			t.Errorf("%s (% x): falls through %v, want %v", c.what, c.code, got, c.falls)
		}
		if strings.HasPrefix(c.what, "vzero") && inst.Len != len(c.code)-1 {
			t.Errorf("%s (% x): %d bytes long, want %d", c.what, c.code, inst.Len, len(c.code)-1)
		}
	}
}
