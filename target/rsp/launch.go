package rsp

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hpcdap/hpcdap/arch"
	"github.com/hpcdap/hpcdap/ppc64"
	"github.com/hpcdap/hpcdap/procimage"
	"github.com/hpcdap/hpcdap/target"
)

const (
	defaultTimeout        = 10 * time.Second
	defaultConnectTimeout = 10 * time.Second
)

// Launch starts a QEMU user-mode emulator (qemu-ppc64, qemu-ppc64le) with its GDB stub on a
// Unix socket, args (emulator options, then the program and its arguments) and environment
// env, and connects to it. The program is stopped at its first instruction; no event is sent
// for that stop.
//
// QEMU's stub has no authentication and accepts one connection: whoever connects first
// controls the guest. So it never listens on TCP here: `-g PATH` makes it listen on a Unix
// socket, in a directory of mode 0700 that only this user can enter, removed when the emulator
// ends. This client takes the one connection at once; when it is closed the program runs on
// without a debugger, and cannot be reconnected to.
func Launch(emulatorPath string, args, env []string) (*Process, error) {
	return LaunchWith(emulatorPath, args, env, Options{})
}

// LaunchWith is Launch with options.
func LaunchWith(emulatorPath string, args, env []string, o Options) (*Process, error) {
	version, err := emulatorVersion(emulatorPath)
	if err != nil {
		return nil, err
	}
	if o.Exe == "" {
		o.Exe = programOf(args)
	}
	dir, err := os.MkdirTemp("", "hpcdap-gdbstub-*") // mode 0700
	if err != nil {
		return nil, fmt.Errorf("rsp: launch %s: socket directory: %w", emulatorPath, err)
	}
	sock := filepath.Join(dir, "stub")
	cmd := exec.Command(emulatorPath, append([]string{"-g", sock}, args...)...)
	cmd.Env, cmd.Dir = env, o.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("rsp: launch %s: %w", emulatorPath, err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		os.RemoveAll(dir)
		close(done)
	}()
	nc, err := dialRetry("unix", sock, connectTimeout(o), done)
	if err != nil {
		_ = cmd.Process.Kill()
		<-done
		return nil, fmt.Errorf("rsp: launch %s: connect to its stub at %s: %w (emulator: %v)", emulatorPath, sock, err, waitErr)
	}
	p, err := newProcess(nc, o, cmd, done, version)
	if err != nil {
		_ = cmd.Process.Kill()
		<-done
		return nil, fmt.Errorf("rsp: launch %s: %w", emulatorPath, err)
	}
	return p, nil
}

// Dial connects to a stub listening at addr (host:port), retrying while nothing listens yet.
func Dial(addr string) (*Process, error) { return DialWith(addr, Options{}) }

// DialWith is Dial with options.
func DialWith(addr string, o Options) (*Process, error) {
	nc, err := dialRetry("tcp", addr, connectTimeout(o), nil)
	if err != nil {
		return nil, fmt.Errorf("rsp: dial %s: %w", addr, err)
	}
	p, err := newProcess(nc, o, nil, nil, "")
	if err != nil {
		return nil, fmt.Errorf("rsp: dial %s: %w", addr, err)
	}
	return p, nil
}

// Wait blocks until a launched emulator has exited and its output has been copied to
// Options.Stdout and Stderr. It returns at once for a process reached with Dial.
func (p *Process) Wait() {
	if p.emuDone != nil {
		<-p.emuDone
	}
}

// Close ends the session at once: a launched emulator is killed, the connection closed.
func (p *Process) Close() error {
	if p.emu != nil && p.emu.Process != nil {
		_ = p.emu.Process.Kill()
		<-p.emuDone
	}
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	p.c.close()
	p.events.abandon()
	return nil
}

func connectTimeout(o Options) time.Duration {
	if o.ConnectTimeout > 0 {
		return o.ConnectTimeout
	}
	return defaultConnectTimeout
}

// dialRetry connects to addr until it succeeds, the deadline passes, or gone is closed (the
// emulator exited).
func dialRetry(network, addr string, timeout time.Duration, gone <-chan struct{}) (net.Conn, error) {
	deadline := time.Now().Add(timeout)
	delay := 2 * time.Millisecond
	for {
		nc, err := net.DialTimeout(network, addr, time.Until(deadline))
		if err == nil {
			if tc, ok := nc.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
			return nc, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-gone:
			return nil, errors.New("emulator exited")
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// emulatorVersion runs `emulator --version` and returns its first line.
func emulatorVersion(path string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("rsp: %s --version: %w", path, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

// qemuVersionRE finds the version number in QEMU's --version line.
var qemuVersionRE = regexp.MustCompile(`version (\d+)\.(\d+)`)

// qemuMajor returns the major version in a QEMU --version line, or 0.
func qemuMajor(version string) int {
	m := qemuVersionRE.FindStringSubmatch(version)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// qemuValueOptions are QEMU user-mode options followed by a value.
var qemuValueOptions = map[string]bool{"-L": true, "-s": true, "-cpu": true, "-E": true, "-U": true,
	"-0": true, "-r": true, "-B": true, "-R": true, "-d": true, "-D": true, "-dfilter": true, "-p": true,
	"-seed": true, "-trace": true, "-plugin": true, "-g": true, "-t": true}

// programOf returns the program in an emulator command line: the first argument that is not
// an option or an option's value.
func programOf(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a
		}
		if qemuValueOptions["-"+strings.TrimLeft(a, "-")] && !strings.Contains(a, "=") {
			i++
		}
	}
	return ""
}

// newProcess performs the handshake on a fresh connection.
func newProcess(nc net.Conn, o Options, emu *exec.Cmd, emuDone chan struct{}, version string) (*Process, error) {
	p := &Process{
		c:          newConn(nc, o.Trace),
		opts:       o,
		timeout:    o.Timeout,
		emu:        emu,
		emuDone:    emuDone,
		reply:      make(chan []byte, 1),
		stops:      make(chan []byte, 16),
		threads:    make(map[int]*thread),
		interrupts: make(map[int]bool),
		stepping:   make(map[int]uint64),
		words:      make(map[uint64]uint32),
		virt:       make(map[uint64]virtualTrap),
		watch:      make(map[int]watchpoint),
		xfer:       make(map[string]bool),
		vcont:      make(map[byte]bool),
		events:     newEventQueue(),
	}
	p.caps.EmulatorVersion = version
	if p.timeout <= 0 {
		p.timeout = defaultTimeout
	}
	p.c.start(p.route)
	go p.stopWorker()
	p.req.Lock()
	err := p.handshake()
	p.req.Unlock()
	if err != nil {
		p.c.close()
		p.events.abandon()
		return nil, err
	}
	return p, nil
}

// handshake learns the stub's features, the target description, the threads and the byte
// order, and probes what the stub can do. The caller holds p.req.
func (p *Process) handshake() error {
	r, err := p.request("qSupported:multiprocess+;swbreak+;hwbreak+;vContSupported+;xmlRegisters=powerpc")
	if err != nil {
		return fmt.Errorf("qSupported: %w", err)
	}
	noAck := false
	for _, f := range strings.Split(string(r), ";") {
		name, val, _ := strings.Cut(f, "=")
		switch {
		case name == "PacketSize":
			n, err := hexUint(val)
			if err == nil && n >= 64 {
				p.pktSize = int(min(n, maxFrameSize))
			}
		case name == "multiprocess+":
			p.multi = true
		case name == "QStartNoAckMode+":
			noAck = true
		case strings.HasPrefix(name, "qXfer:") && strings.HasSuffix(name, ":read+"):
			p.xfer[strings.TrimSuffix(strings.TrimPrefix(name, "qXfer:"), ":read+")] = true
		}
	}
	p.caps.PacketSize = p.pktSize
	if noAck {
		if err := p.requestOK("start no-ack mode", "QStartNoAckMode"); err == nil {
			p.c.noAck.Store(true)
			p.caps.NoAck = true
		}
	}
	r, err = p.exchange("?", true)
	if err != nil {
		return fmt.Errorf("?: %w", err)
	}
	sr, err := parseStop(r)
	if err != nil {
		return fmt.Errorf("?: %w", err)
	}
	if sr.Kind == 'W' || sr.Kind == 'X' {
		return fmt.Errorf("?: %w (%q)", target.ErrExited, r)
	}
	if sr.HasThread && sr.Thread.pid > 0 {
		p.pid = sr.Thread.pid
	}
	// The target description comes first: QEMU 7.2 crashes on g before it has been read.
	if p.xfer["features"] {
		p.td, err = parseTdesc("target.xml", func(annex string) ([]byte, error) { return p.readXfer("features", annex) })
		if err != nil {
			return err
		}
	} else {
		p.td, err = parseTdesc("target.xml", func(string) ([]byte, error) { return []byte(builtinPowerpc64), nil })
		if err != nil {
			return err
		}
		p.notes = append(p.notes, "the stub sends no target description: QEMU's ppc64 register layout is assumed")
	}
	if p.td.Arch != "" && !strings.Contains(p.td.Arch, "powerpc") {
		return fmt.Errorf("target architecture %q is not Power: %w", p.td.Arch, target.ErrUnsupported)
	}
	if p.pcReg = p.td.reg("pc"); p.pcReg == nil || p.pcReg.Size() != 8 {
		return fmt.Errorf("target description has no 64-bit pc: %w", target.ErrUnsupported)
	}
	if r, err := p.request("vCont?"); err == nil && bytes.HasPrefix(r, []byte("vCont")) {
		for _, a := range strings.Split(string(r), ";")[1:] {
			if len(a) == 1 {
				p.vcont[a[0]] = true
			}
		}
	}
	// QEMU answers its own query with its single-step flags ("ENABLE=1,NOIRQ=2,NOTIMER=4").
	if r, err := p.request("qqemu.sstepbits"); err == nil && bytes.HasPrefix(r, []byte("ENABLE=")) {
		p.caps.QEMU = true
	}
	if err := p.refreshThreads(); err != nil {
		return err
	}
	if len(p.tidOrder) == 0 {
		return errors.New("the stub lists no threads")
	}
	if !sr.HasThread {
		sr.Thread.tid = p.tidOrder[0]
	}
	if err := p.learnOrder(); err != nil {
		return err
	}
	p.probe(sr.Thread.tid)
	p.describe()
	return nil
}

// learnOrder takes the byte order from the executable's ELF header, else from MSR[LE].
func (p *Process) learnOrder() error {
	if p.opts.Exe == "" && p.xfer["exec-file"] {
		if b, err := p.readXfer("exec-file", fmt.Sprintf("%x", p.pid)); err == nil && len(b) > 0 {
			p.opts.Exe = string(b)
		}
	}
	if p.opts.Exe != "" {
		f, err := elf.Open(p.opts.Exe)
		if err == nil {
			defer f.Close()
			if f.Machine != elf.EM_PPC64 {
				return fmt.Errorf("%s is %v, not EM_PPC64: %w", p.opts.Exe, f.Machine, target.ErrUnsupported)
			}
			p.order = f.ByteOrder
			return nil
		}
	}
	msr := p.td.reg("msr")
	if msr == nil || msr.Size() != 8 {
		return errors.New("no executable and no 64-bit msr: byte order unknown")
	}
	raw, err := p.readRegister(msr)
	if err != nil {
		return err
	}
	// MSR[SF] (the top bit) is set in 64-bit mode; where it lies tells the byte order, and
	// MSR[LE] (the bottom bit) confirms it.
	switch {
	case raw[0]&0x80 != 0 && raw[7]&1 == 0:
		p.order = binary.BigEndian
	case raw[7]&0x80 != 0 && raw[0]&1 != 0:
		p.order = binary.LittleEndian
	default:
		return fmt.Errorf("msr % x: byte order unknown", raw)
	}
	return nil
}

// probe finds out at run time whether the stub writes text, takes stub breakpoints and
// watchpoints, and how it can be interrupted. Probes leave memory as it was.
func (p *Process) probe(tid int) {
	pc, err := p.readPC(tid)
	if err != nil {
		return
	}
	if t := p.threads[tid]; t != nil {
		t.pc, t.pcKnown = pc, true
	}
	word := make([]byte, 4)
	if _, err := p.readMemory(pc, word); err == nil {
		_, werr := p.writeMemory(pc, word)
		p.caps.TextWrites = werr == nil
		if werr != nil {
			p.notes = append(p.notes, fmt.Sprintf("the stub cannot write program text (%v): trap words written there are carried out as stub breakpoints (Z0)", werr))
		}
	}
	if p.requestOK("probe breakpoint", fmt.Sprintf("Z0,%x,4", pc)) == nil {
		p.caps.StubBreakpoints = true
		_ = p.requestOK("probe breakpoint", fmt.Sprintf("z0,%x,4", pc))
	}
	if p.requestOK("probe watchpoint", fmt.Sprintf("Z2,%x,4", pc)) == nil {
		p.caps.Watchpoints = 1
		_ = p.requestOK("probe watchpoint", fmt.Sprintf("z2,%x,4", pc))
	}
	switch {
	case !p.caps.QEMU:
		p.caps.Interrupt = InterruptByte
	case p.emu == nil:
		p.caps.Interrupt = InterruptNone
		p.notes = append(p.notes, "QEMU user mode ignores the interrupt byte, and the emulator was not launched here: Interrupt is not possible")
	case qemuMajor(p.caps.EmulatorVersion) >= 9 || (qemuMajor(p.caps.EmulatorVersion) == 0 && p.caps.TextWrites):
		if p.opts.InterruptSignal != nil {
			p.caps.Interrupt = InterruptSignal
		} else {
			p.caps.Interrupt = InterruptNone
			p.notes = append(p.notes, "QEMU ≥ 9 user mode ignores the interrupt byte and dies of a signal the program does not handle: Interrupt needs Options.InterruptSignal")
		}
	default:
		p.caps.Interrupt = InterruptSignal
	}
	if p.caps.QEMU {
		p.notes = append(p.notes, "QEMU user mode: other threads keep running while one is stopped, and several threads may report stops for one resume")
	}
}

// describe fills in Info.
func (p *Process) describe() {
	pid := 0
	switch {
	case p.emu != nil && p.emu.Process != nil:
		pid = p.emu.Process.Pid
	case p.pid > 1: // QEMU 7.2 sends a fake pid 1
		pid = p.pid
	}
	exe := p.opts.Exe
	if exe != "" && !strings.HasPrefix(exe, "/") {
		if wd, err := os.Getwd(); err == nil {
			dir := wd
			if p.opts.Dir != "" {
				dir = p.opts.Dir
			}
			exe = dir + "/" + exe
		}
	}
	a, _ := arch.For(elf.EM_PPC64, p.order) // every byte order of EM_PPC64 is described
	p.info = target.Info{
		Machine:   a.Machine,
		ByteOrder: a.ByteOrder,
		PtrSize:   a.PtrSize,
		Pid:       pid,
		Exe:       exe,
		PageSize:  p.pageSize(),
		Arch: target.Arch{
			// The agent gives emulated Power targets the CNK's semantics, so it plants the
			// CNK's trap word rather than the Linux one.
			BreakInstr:   ppc64.PutWord(p.order, ppc64.TrapWordCNK),
			PCAfterBreak: a.PCAfterTrap,
			WatchSlots:   p.caps.Watchpoints,
		},
	}
}

// pageSize reads AT_PAGESZ from the auxiliary vector (4096 if it cannot).
func (p *Process) pageSize() int {
	if !p.xfer["auxv"] {
		return 4096
	}
	auxv, err := p.readXfer("auxv", "")
	if err != nil {
		return 4096
	}
	a, err := procimage.ParseAuxv(auxv, procimage.Layout{Order: p.order, PtrSize: 8})
	if err != nil || a[procimage.AtPagesz] == 0 {
		return 4096
	}
	return int(a[procimage.AtPagesz])
}

// builtinPowerpc64 is QEMU's ppc64 core register layout, for a stub that sends no target
// description.
const builtinPowerpc64 = `<target><architecture>powerpc:common64</architecture>
<feature name="org.gnu.gdb.power.core">
<reg name="r0" bitsize="64" regnum="0"/><reg name="r1" bitsize="64"/><reg name="r2" bitsize="64"/>
<reg name="r3" bitsize="64"/><reg name="r4" bitsize="64"/><reg name="r5" bitsize="64"/>
<reg name="r6" bitsize="64"/><reg name="r7" bitsize="64"/><reg name="r8" bitsize="64"/>
<reg name="r9" bitsize="64"/><reg name="r10" bitsize="64"/><reg name="r11" bitsize="64"/>
<reg name="r12" bitsize="64"/><reg name="r13" bitsize="64"/><reg name="r14" bitsize="64"/>
<reg name="r15" bitsize="64"/><reg name="r16" bitsize="64"/><reg name="r17" bitsize="64"/>
<reg name="r18" bitsize="64"/><reg name="r19" bitsize="64"/><reg name="r20" bitsize="64"/>
<reg name="r21" bitsize="64"/><reg name="r22" bitsize="64"/><reg name="r23" bitsize="64"/>
<reg name="r24" bitsize="64"/><reg name="r25" bitsize="64"/><reg name="r26" bitsize="64"/>
<reg name="r27" bitsize="64"/><reg name="r28" bitsize="64"/><reg name="r29" bitsize="64"/>
<reg name="r30" bitsize="64"/><reg name="r31" bitsize="64"/>
<reg name="pc" bitsize="64" regnum="64"/><reg name="msr" bitsize="64"/><reg name="cr" bitsize="32"/>
<reg name="lr" bitsize="64"/><reg name="ctr" bitsize="64"/><reg name="xer" bitsize="32"/>
</feature></target>`
