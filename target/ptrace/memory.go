//go:build linux && amd64

package ptrace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/hpcdap/hpcdap/target"
	"golang.org/x/sys/unix"
)

// Memory is read and written from the calling goroutine, not the tracer's thread: neither
// process_vm_readv nor /proc/PID/mem needs the tracer, so memory traffic for many ranks runs in
// parallel and does not queue behind ptrace requests.

const maxAddr = 1<<63 - 1 // /proc/PID/mem offsets are signed

// ReadMemory reads len(b) bytes at addr with process_vm_readv, and through /proc/PID/mem for
// what that refuses (pages without read permission, which a debugger may still read). It
// returns the number of bytes read before the first unreadable address.
func (p *process) ReadMemory(addr uint64, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if err := p.usable(); err != nil {
		return 0, wrapErr("read memory", p.memObj(addr), nil, err)
	}
	n, err := p.readMem(addr, b)
	if n == len(b) {
		return n, nil
	}
	return n, p.memFail("read memory", addr+uint64(n), err)
}

// WriteMemory writes b at addr through /proc/PID/mem, which writes read-only program text too
// (the kernel breaks copy-on-write for the process's private copy). Kernels built with
// CONFIG_PROC_MEM_FORCE_PTRACE allow that only to the tracer's own thread, so what fails from the
// caller is retried there, and finally word by word with PTRACE_POKEDATA through a stopped
// thread.
func (p *process) WriteMemory(addr uint64, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if err := p.usable(); err != nil {
		return 0, wrapErr("write memory", p.memObj(addr), nil, err)
	}
	n, err := p.writeMemFile(addr, b)
	if n == len(b) {
		return n, nil
	}
	cerr := p.t.call(func() error {
		m, e := p.writeMemFile(addr+uint64(n), b[n:])
		n += m
		if n < len(b) {
			m, pe := p.poke(addr+uint64(n), b[n:])
			n += m
			if pe != target.ErrRunning {
				e = pe // else: no stopped thread to poke through; keep the file's answer
			}
		}
		if e != nil {
			err = e
		}
		return nil
	})
	if cerr != nil {
		err = cerr
	}
	if n == len(b) {
		return n, nil
	}
	return n, p.memFail("write memory", addr+uint64(n), err)
}

// ReadMemoryAsProcess reads len(b) bytes at addr as the process itself could
// (process_vm_readv alone): a page the process may not read fails (target.MemoryAsProcess).
func (p *process) ReadMemoryAsProcess(addr uint64, b []byte) (int, error) {
	return p.vmAccess(false, addr, b)
}

// WriteMemoryAsProcess writes b at addr as the process itself could (process_vm_writev): a
// read-only or unmapped page fails, and exactly len(b) bytes change (target.MemoryAsProcess).
func (p *process) WriteMemoryAsProcess(addr uint64, b []byte) (int, error) {
	return p.vmAccess(true, addr, b)
}

func (p *process) vmAccess(write bool, addr uint64, b []byte) (int, error) {
	op := "read memory as the process"
	if write {
		op = "write memory as the process"
	}
	if len(b) == 0 {
		return 0, nil
	}
	if err := p.usable(); err != nil {
		return 0, wrapErr(op, p.memObj(addr), nil, err)
	}
	n, err := p.vm(write, addr, b)
	if n == len(b) {
		return n, nil
	}
	if err == nil {
		err = unix.EFAULT
	}
	return n, p.memFail(op, addr+uint64(n), err)
}

// vm reads or writes b at addr with process_vm_readv or process_vm_writev, which apply the
// process's own page protections, and returns the bytes done before any error.
func (p *process) vm(write bool, addr uint64, b []byte) (int, error) {
	if addr > maxAddr || uint64(len(b)) > maxAddr-addr {
		return 0, unix.EFAULT
	}
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
	var n int
	var err error
	if write {
		n, err = unix.ProcessVMWritev(p.pid, local, remote, 0)
	} else {
		n, err = unix.ProcessVMReadv(p.pid, local, remote, 0)
	}
	return max(n, 0), err
}

func (p *process) memObj(addr uint64) string { return fmt.Sprintf("pid %d at %#x", p.pid, addr) }

func (p *process) memFail(op string, addr uint64, err error) error {
	if p.exited() || errors.Is(err, unix.ESRCH) || err == errNoMM {
		return wrapErr(op, p.memObj(addr), target.ErrExited, err)
	}
	if class := errClass(err, false, true); class != nil || err == nil {
		if class == nil {
			class = target.ErrAddress
		}
		return wrapErr(op, p.memObj(addr), class, err)
	}
	return wrapErr(op, p.memObj(addr), target.ErrAddress, err)
}

// errNoMM: /proc/PID/mem reads nothing and reports no error once the address space is gone.
var errNoMM = errors.New("address space gone")

func (p *process) readMem(addr uint64, b []byte) (int, error) {
	if addr > maxAddr || uint64(len(b)) > maxAddr-addr {
		return 0, unix.EFAULT
	}
	n, err := p.vm(false, addr, b)
	if n == len(b) {
		return n, nil
	}
	if err == unix.ESRCH {
		return n, err
	}
	m, err2 := p.memFile(false, addr+uint64(n), b[n:])
	n += m
	if err2 != nil || n == len(b) {
		return n, err2
	}
	return n, err
}

func (p *process) writeMemFile(addr uint64, b []byte) (int, error) {
	if addr > maxAddr || uint64(len(b)) > maxAddr-addr {
		return 0, unix.EFAULT
	}
	return p.memFile(true, addr, b)
}

// memFile reads or writes /proc/PID/mem until done or an error.
func (p *process) memFile(write bool, addr uint64, b []byte) (int, error) {
	p.memMu.RLock()
	defer p.memMu.RUnlock()
	if p.mem == nil {
		return 0, unix.EBADF
	}
	fd := int(p.mem.Fd())
	done := 0
	for done < len(b) {
		var n int
		var err error
		if write {
			n, err = unix.Pwrite(fd, b[done:], int64(addr)+int64(done))
		} else {
			n, err = unix.Pread(fd, b[done:], int64(addr)+int64(done))
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, errNoMM
		}
		done += n
	}
	return done, nil
}

// poke writes with PTRACE_PEEKDATA/POKEDATA through any stopped thread. Runs on the tracer's
// thread.
func (p *process) poke(addr uint64, b []byte) (int, error) {
	var tid int
	for _, th := range p.threads {
		if th.state == tsStopped {
			tid = th.tid
			break
		}
	}
	if tid == 0 {
		return 0, target.ErrRunning
	}
	done := 0
	for done < len(b) {
		a := addr + uint64(done)
		word := a &^ 7
		var w [8]byte
		if err := ptracePtr(unix.PTRACE_PEEKDATA, tid, uintptr(word), unsafe.Pointer(&w[0])); err != nil {
			return done, err
		}
		k := copy(w[a-word:], b[done:])
		if err := ptraceRaw(unix.PTRACE_POKEDATA, tid, uintptr(word), uintptr(binary.NativeEndian.Uint64(w[:]))); err != nil {
			return done, err
		}
		done += k
	}
	return done, nil
}
