//go:build linux && amd64

package ptrace

import (
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/hpcdap/hpcdap/procimage"
	"golang.org/x/sys/unix"
)

// seizeOptions are set on every tracee. Deliberately absent: PTRACE_O_EXITKILL (if the agent
// dies the kernel detaches and the job keeps running), TRACEFORK/TRACEVFORK (a rank's children
// are not followed), TRACEEXIT (thread and process exits are read from wait statuses).
const seizeOptions = unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC

// si_code values (include/uapi/asm-generic/siginfo.h) that x/sys/unix does not name.
const (
	siUser    = 0
	siKernel  = 0x80
	siTkill   = -6
	trapBrkpt = 1
	trapTrace = 2
	trapHwbkp = 4
	trapUnk   = 5 // also what a ptrace_notify SIGTRAP report carries (si_code = SIGTRAP)
)

func ptraceRaw(req int, tid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// ptracePtr passes a pointer to Go memory as the data argument.
func ptracePtr(req int, tid int, addr uintptr, data unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, uintptr(data), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func seize(tid int) error { return ptraceRaw(unix.PTRACE_SEIZE, tid, 0, seizeOptions) }

func peekUser(tid int, off uintptr) (uint64, error) {
	var v uint64
	err := ptracePtr(unix.PTRACE_PEEKUSR, tid, off, unsafe.Pointer(&v))
	return v, err
}

func pokeUser(tid int, off uintptr, v uint64) error {
	return ptraceRaw(unix.PTRACE_POKEUSR, tid, off, uintptr(v))
}

func eventMsg(tid int) (uint64, error) {
	var v uint64
	err := ptracePtr(unix.PTRACE_GETEVENTMSG, tid, 0, unsafe.Pointer(&v))
	return v, err
}

// siginfo is the part of a kernel siginfo_t the back end uses.
type siginfo struct {
	Signo int
	Errno int
	Code  int
	Pid   int    // sender, for signals sent by kill/tgkill (Code <= 0)
	Addr  uint64 // fault address, for kernel-generated faults and traps (Code > 0)
}

const siginfoSize = 128

func getSiginfo(tid int) (siginfo, error) {
	b, err := rawSiginfo(tid)
	if err != nil {
		return siginfo{}, err
	}
	return parseSiginfo(b[:])
}

func rawSiginfo(tid int) ([siginfoSize]byte, error) {
	var b [siginfoSize]byte
	err := ptracePtr(unix.PTRACE_GETSIGINFO, tid, 0, unsafe.Pointer(&b[0]))
	return b, err
}

// parseSiginfo decodes a 64-bit little-endian siginfo_t: si_signo, si_errno and si_code are
// ints at 0, 4 and 8; the union starts at 16 (si_pid for kill, si_addr for faults).
func parseSiginfo(b []byte) (siginfo, error) {
	if len(b) < 24 {
		return siginfo{}, fmt.Errorf("siginfo: %d bytes, need 24", len(b))
	}
	le := binary.LittleEndian
	si := siginfo{
		Signo: int(int32(le.Uint32(b[0:]))),
		Errno: int(int32(le.Uint32(b[4:]))),
		Code:  int(int32(le.Uint32(b[8:]))),
	}
	if si.Code > 0 {
		si.Addr = le.Uint64(b[16:])
	} else {
		si.Pid = int(int32(le.Uint32(b[16:])))
	}
	return si, nil
}

// waitEvent is the PTRACE_EVENT_* number carried in bits 16-23 of a stop status.
// schedYield gives the processor to another runnable thread, if any.
func schedYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

func waitEvent(ws unix.WaitStatus) int { return int(ws>>16) & 0xff }

func isStopSignal(sig int) bool {
	switch unix.Signal(sig) {
	case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		return true
	}
	return false
}

// SignalPending reports whether sig is pending for process pid or one of its threads
// (/proc/PID/task/*/status, SigPnd and ShdPnd): sent, and not yet delivered or dequeued.
func SignalPending(pid int, sig syscall.Signal) bool {
	tids, err := taskList(pid)
	if err != nil {
		return false
	}
	bit := uint64(1) << (sig - 1)
	for _, tid := range tids {
		if st, err := procimage.ReadStatus(tid); err == nil && (st.SigPnd|st.ShdPnd)&bit != 0 {
			return true
		}
	}
	return false
}

// taskList lists /proc/PID/task: the leader first, then the other threads in ascending order.
func taskList(pid int) ([]int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	return parseTaskNames(pid, names), nil
}

func parseTaskNames(pid int, names []string) []int {
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil && tid > 0 {
			tids = append(tids, tid)
		}
	}
	sortLeaderFirst(pid, tids)
	return tids
}

func sortLeaderFirst(pid int, tids []int) {
	sort.Slice(tids, func(i, j int) bool {
		a, b := tids[i], tids[j]
		if a == pid || b == pid {
			return a == pid && b != pid
		}
		return a < b
	})
}
