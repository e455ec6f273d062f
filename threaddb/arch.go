package threaddb

import (
	"debug/elf"
	"fmt"
)

// Machine facts glibc compiles into libthread_db rather than describing with descriptors.
const (
	// x86_64 ps_get_thread_area index for the FS segment (FS in <sys/reg.h>): the thread pointer is
	// the FS base.
	x86FSIndex = 25

	// ppc64TPOffset is TLS_TCB_OFFSET on powerpc: r13 points 0x7000 bytes past the end of the TCB,
	// so that signed 16-bit displacements reach 64 KiB of TLS.
	ppc64TPOffset = 0x7000
	// ppc64 thread-pointer register and its byte offset in a pt_regs-ordered register set.
	ppc64TPReg       = 13
	ppc64TPRegOffset = ppc64TPReg * 8
)

// tlsLayout is the TLS variant of the machine: where the static TLS blocks lie relative to the
// thread descriptor, and the sentinel values of link_map.l_tls_offset.
type tlsLayout struct {
	tcbAtTP       bool  // variant II (x86_64): blocks below the TCB; variant I (ppc64): above it
	noTLSOffset   int64 // l_tls_offset of a module whose static TLS offset is not assigned
	forcedDynamic int64 // l_tls_offset of a module forced into dynamic TLS
}

func (l *Library) tlsLayout() tlsLayout {
	if l.Machine == elf.EM_PPC64 {
		// l_tls_offset == 0 is valid on powerpc, so glibc moves the sentinels down by one.
		return tlsLayout{tcbAtTP: false, noTLSOffset: -1, forcedDynamic: -2}
	}
	return tlsLayout{tcbAtTP: true, noTLSOffset: 0, forcedDynamic: -1}
}

// preTCBSize is TLS_PRE_TCB_SIZE on ppc64: the bytes from the start of struct pthread to the end
// of the TCB (struct pthread rounded up, then tcbhead_t). glibc's register descriptor bias is
// -(0x7000 + TLS_PRE_TCB_SIZE), so the size follows from the bias and the machine's 0x7000.
func (l *Library) preTCBSize() (uint64, error) {
	d, ok := l.descs["register64"]
	if !ok {
		return 0, fmt.Errorf("threaddb: %s: no _thread_db_register64", l.Module.Path)
	}
	pre := -d.Bias() - ppc64TPOffset
	if pre <= 0 || pre > 1<<20 {
		return 0, fmt.Errorf("threaddb: %s: _thread_db_register64 bias %d gives an implausible TLS_PRE_TCB_SIZE %d",
			l.Module.Path, d.Bias(), pre)
	}
	return uint64(pre), nil
}

// pthreadFromTP converts a raw thread-pointer register value into the address of the thread's
// struct pthread (its pthread_t), as libthread_db's td_ta_map_lwp2thr does.
func (p *Process) pthreadFromTP(tp uint64) (uint64, error) {
	l := p.lib
	switch l.Machine {
	case elf.EM_X86_64:
		if l.constThreadArea != x86FSIndex {
			return 0, fmt.Errorf("threaddb: %s: _thread_db_const_thread_area = %d, only %d (FS) is supported",
				l.Module.Path, l.constThreadArea, x86FSIndex)
		}
		// The FS base points at the TCB, which begins struct pthread.
		return tp, nil
	case elf.EM_PPC64:
		d := l.descs["register64"]
		if d.Offset != ppc64TPRegOffset {
			return 0, fmt.Errorf("threaddb: %s: _thread_db_register64 names register offset %d, not r13 (%d)",
				l.Module.Path, d.Offset, ppc64TPRegOffset)
		}
		pre, err := l.preTCBSize()
		if err != nil {
			return 0, err
		}
		return tp - ppc64TPOffset - pre, nil
	}
	return 0, fmt.Errorf("threaddb: machine %v is not supported", l.Machine)
}

// staticTLSBlock returns the address of a module's block in the static TLS area of the thread
// whose struct pthread is at pd, given the module's l_tls_offset.
func (p *Process) staticTLSBlock(pd uint64, tlsOffset int64) (uint64, error) {
	if p.lib.tlsLayout().tcbAtTP {
		// Variant II: the block lies l_tls_offset bytes below the thread pointer (= pd).
		return pd - uint64(tlsOffset), nil
	}
	// Variant I: the block lies l_tls_offset bytes above the end of the TCB.
	pre, err := p.lib.preTCBSize()
	if err != nil {
		return 0, err
	}
	return pd + pre + uint64(tlsOffset), nil
}
