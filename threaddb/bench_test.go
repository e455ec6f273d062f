//go:build linux && amd64

package threaddb_test

import (
	"os/exec"
	"strconv"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/threaddb"
)

const benchThreads = 1000

// benchTarget starts the test program with 1,000 blocked workers and opens it.
func benchTarget(b *testing.B) (*target, *threaddb.Process, *procMem, *tracer) {
	b.Helper()
	progs := buildPrograms(b)
	tg := startTarget(b, progs.dynamic, benchThreads)
	mem := openProcMem(b, tg.pid)
	tr := seizeAll(b, tg.pid)
	p, err := threaddb.Open(tg.pid, procModules(b, tg.pid), mem, tr)
	if err != nil {
		b.Fatal(err)
	}
	return tg, p, mem, tr
}

// BenchmarkList1000 walks the thread lists of a stopped process with 1,001 threads, reading
// memory through /proc/PID/mem; reads/op counts calls to Memory.ReadAt.
func BenchmarkList1000(b *testing.B) {
	_, p, mem, _ := benchTarget(b)
	if l, err := p.List(); err != nil || len(l.Threads) != benchThreads+1 {
		b.Fatalf("List: %d threads, %v", len(l.Threads), err)
	}
	r0, by0 := mem.reads.Load(), mem.bytes.Load()
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.List(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(mem.reads.Load()-r0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(mem.bytes.Load()-by0)/float64(b.N), "readbytes/op")
}

// BenchmarkMapLWP1000 maps every LWP of the process to its thread (FS base through ptrace, then
// one descriptor read), as a debugger does for each stopped thread.
func BenchmarkMapLWP1000(b *testing.B) {
	tg, p, mem, _ := benchTarget(b)
	lwps, err := procLWPs(tg.pid)
	if err != nil || len(lwps) != benchThreads+1 {
		b.Fatalf("LWPs: %d, %v", len(lwps), err)
	}
	r0 := mem.reads.Load()
	b.ResetTimer()
	for b.Loop() {
		for _, lwp := range lwps {
			if _, err := p.MapLWP(lwp); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(mem.reads.Load()-r0)/float64(b.N), "reads/op")
}

// BenchmarkGDBInfoThreads1000 times gdb (with glibc's libthread_db) attaching to the same kind of
// process and listing its threads: `gdb -batch -p PID -ex 'info threads'`.
func BenchmarkGDBInfoThreads1000(b *testing.B) {
	testenv.NeedTool(b, "gdb", "gdb")
	progs := buildPrograms(b)
	tg := startTarget(b, progs.dynamic, benchThreads)
	b.ResetTimer()
	for b.Loop() {
		out, err := exec.Command("gdb", "-batch", "-nx", "-p", strconv.Itoa(tg.pid), "-ex", "info threads").CombinedOutput()
		if err != nil {
			b.Fatalf("gdb: %v\n%s", err, out)
		}
	}
}

// BenchmarkAttachList1000 is the package's equivalent of the gdb benchmark: stop every thread
// with ptrace (PTRACE_SEIZE and PTRACE_INTERRUPT), open the process, list its threads, detach.
func BenchmarkAttachList1000(b *testing.B) {
	progs := buildPrograms(b)
	tg := startTarget(b, progs.dynamic, benchThreads)
	mem := openProcMem(b, tg.pid)
	b.ResetTimer()
	for b.Loop() {
		tr := seizeAll(b, tg.pid)
		p, err := threaddb.Open(tg.pid, procModules(b, tg.pid), mem, tr)
		if err != nil {
			b.Fatal(err)
		}
		if l, err := p.List(); err != nil || len(l.Threads) != benchThreads+1 {
			b.Fatalf("List: %d threads, %v", len(l.Threads), err)
		}
		tr.detach()
	}
}

// BenchmarkTLSAddress1000 resolves a thread-local variable of the executable in each of the
// 1,001 threads listed by List (the DTV walk of DW_OP_form_tls_address).
func BenchmarkTLSAddress1000(b *testing.B) {
	tg, p, mem, _ := benchTarget(b)
	path := buildPrograms(b).dynamic
	exe := moduleFor(b, procModules(b, tg.pid), path)
	off := testenv.NMSymbol(b, path, "tlsvar")
	list, err := p.List()
	if err != nil {
		b.Fatal(err)
	}
	r0 := mem.reads.Load()
	b.ResetTimer()
	for b.Loop() {
		for _, th := range list.Threads {
			if _, err := p.TLSAddress(th, exe, off); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(mem.reads.Load()-r0)/float64(b.N), "reads/op")
}
