package threaddb_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/hpcdap/hpcdap/internal/testenv"
	"github.com/hpcdap/hpcdap/threaddb"
)

const (
	hostLibc    = "/lib/x86_64-linux-gnu/libc.so.6"
	ppc64Libc   = "/usr/powerpc64-linux-gnu/lib/libc.so.6"
	ppc64leLibc = "/usr/powerpc64le-linux-gnu/lib/libc.so.6"
)

func readLib(t testing.TB, path string) *threaddb.Library {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (Debian packages libc6, libc6-ppc64-cross, libc6-ppc64el-cross provide the libc files)", err)
	}
	defer f.Close()
	l, err := threaddb.ReadLibrary(f, threaddb.Module{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestHostDescriptorsMatchDebugInfo checks every decoded x86_64 descriptor against the layout
// of glibc's own structures, which gdb reads from libc's debug information (libc6-dbg).
func TestHostDescriptorsMatchDebugInfo(t *testing.T) {
	testenv.NeedTool(t, "gdb", "gdb")
	lib := readLib(t, hostLibc)
	if lib.Machine != elf.EM_X86_64 || lib.Order != binary.LittleEndian || lib.PtrSize != 8 || lib.Static {
		t.Fatalf("target description: %v %v %d static=%v", lib.Machine, lib.Order, lib.PtrSize, lib.Static)
	}
	// descriptor name -> (structure, member); offsets and sizes come from gdb.
	fields := []struct{ name, typ, member string }{
		{"pthread_list", "struct pthread", "list"},
		{"pthread_tid", "struct pthread", "tid"},
		{"pthread_start_routine", "struct pthread", "start_routine"},
		{"pthread_report_events", "struct pthread", "report_events"},
		{"pthread_cancelhandling", "struct pthread", "cancelhandling"},
		{"pthread_schedpolicy", "struct pthread", "schedpolicy"},
		{"pthread_schedparam_sched_priority", "struct pthread", "schedparam.sched_priority"},
		{"pthread_specific", "struct pthread", "specific"},
		{"pthread_eventbuf", "struct pthread", "eventbuf"},
		{"pthread_eventbuf_eventmask", "struct pthread", "eventbuf.eventmask"},
		{"pthread_nextevent", "struct pthread", "nextevent"},
		{"pthread_dtvp", "struct pthread", "header.dtv"},
		{"list_t_next", "struct list_head", "next"},
		{"list_t_prev", "struct list_head", "prev"},
		{"rtld_global__dl_stack_used", "struct rtld_global", "_dl_stack_used"},
		{"rtld_global__dl_stack_user", "struct rtld_global", "_dl_stack_user"},
		{"rtld_global__dl_tls_dtv_slotinfo_list", "struct rtld_global", "_dl_tls_dtv_slotinfo_list"},
		{"link_map_l_tls_modid", "struct link_map", "l_tls_modid"},
		{"link_map_l_tls_offset", "struct link_map", "l_tls_offset"},
		{"dtv_slotinfo_list_len", "struct dtv_slotinfo_list", "len"},
		{"dtv_slotinfo_list_next", "struct dtv_slotinfo_list", "next"},
		{"dtv_slotinfo_gen", "struct dtv_slotinfo", "gen"},
		{"dtv_slotinfo_map", "struct dtv_slotinfo", "map"},
		{"pthread_key_struct_seq", "struct pthread_key_struct", "seq"},
		{"pthread_key_struct_destr", "struct pthread_key_struct", "destr"},
		{"pthread_key_data_seq", "struct pthread_key_data", "seq"},
		{"pthread_key_data_data", "struct pthread_key_data", "data"},
	}
	sizes := []struct{ name, typ string }{
		{"pthread", "struct pthread"},
		{"list_t", "list_t"},
		{"pthread_key_struct", "struct pthread_key_struct"},
		{"pthread_key_data", "struct pthread_key_data"},
		{"dtv_slotinfo", "struct dtv_slotinfo"},
		{"td_eventbuf_t", "td_eventbuf_t"},
	}
	args := []string{"-batch", "-nx", hostLibc}
	for _, f := range fields {
		args = append(args, "-ex", fmt.Sprintf("print (long)&((%s *)0)->%s", f.typ, f.member),
			"-ex", fmt.Sprintf("print (long)sizeof(((%s *)0)->%s)", f.typ, f.member))
	}
	for _, s := range sizes {
		args = append(args, "-ex", fmt.Sprintf("print (long)sizeof(%s)", s.typ))
	}
	args = append(args, "-ex", "print (long)sizeof(((struct pthread *)0)->specific[0])")
	out := run(t, "", "gdb", args...)
	var vals []int64
	for _, line := range strings.Split(out, "\n") {
		if m := gdbValue.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			v, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil {
				t.Fatalf("gdb: %q: %v", line, err)
			}
			vals = append(vals, v)
		}
	}
	if want := 2*len(fields) + len(sizes) + 1; len(vals) != want {
		t.Fatalf("gdb printed %d values, want %d: is libc6-dbg installed?\n%s", len(vals), want, out)
	}
	for i, f := range fields {
		d, ok := lib.Desc(f.name)
		if !ok {
			t.Errorf("%s missing", f.name)
			continue
		}
		off, size := vals[2*i], vals[2*i+1]
		if int64(d.Offset) != off || int64(d.Bits) != 8*size || d.Count != 1 {
			t.Errorf("%s = %v; debug info: offset %d, %d bytes", f.name, d, off, size)
		}
	}
	for i, s := range sizes {
		got, ok := lib.Sizeof(s.name)
		if want := vals[2*len(fields)+i]; !ok || int64(got) != want {
			t.Errorf("sizeof %s = %d (%v); debug info %d", s.name, got, ok, want)
		}
	}
	// TSD: the specific array holds pointers, which Specific relies on.
	if ptr := vals[len(vals)-1]; ptr != int64(lib.PtrSize) {
		t.Errorf("specific[0] is %d bytes, want a pointer", ptr)
	}
	if a, ok := lib.ConstThreadArea(); !ok || a != 25 {
		t.Errorf("const_thread_area = %d (%v), want 25 (FS)", a, ok)
	}
}

// TestStaticDescriptorsMatchShared checks that a static executable carries the same structure
// descriptors as the shared libc of the same glibc, and the static list-head variables.
func TestStaticDescriptorsMatchShared(t *testing.T) {
	progs := buildPrograms(t)
	shared := readLib(t, hostLibc)
	static := readLib(t, progs.static)
	if !static.Static || static.Version != shared.Version {
		t.Fatalf("static: Static=%v version %q; shared version %q", static.Static, static.Version, shared.Version)
	}
	for _, n := range shared.DescNames() {
		if strings.HasPrefix(n, "rtld_global_") || strings.HasPrefix(n, "sizeof_") || n == "const_thread_area" || n == "__nptl_rtld_global" {
			continue
		}
		a, _ := shared.Desc(n)
		b, ok := static.Desc(n)
		if !ok || a != b {
			t.Errorf("%s: shared %v, static %v (%v)", n, a, b, ok)
		}
	}
	for _, n := range []string{"_dl_stack_user", "_dl_stack_used", "_dl_tls_dtv_slotinfo_list", "__nptl_initial_report_events"} {
		if _, ok := static.Desc(n); !ok {
			t.Errorf("static executable lacks %s%s", threaddb.DescPrefix, n)
		}
	}
}

// ppc64Spec is the table of shared/spec/ppc64.md §5.3 (glibc 2.36, identical for ppc64 and
// ppc64le), the values measured when the project's spec was written.
var ppc64Spec = map[string]threaddb.Desc{
	"pthread_tid":                           {32, 1, 208},
	"pthread_list":                          {128, 1, 192},
	"pthread_start_routine":                 {64, 1, 1080},
	"pthread_report_events":                 {8, 1, 1041},
	"pthread_dtvp":                          {64, 1, 1976},
	"pthread_specific":                      {2048, 1, 784},
	"pthread_eventbuf":                      {192, 1, 1096},
	"pthread_eventbuf_eventmask":            {64, 1, 1096},
	"pthread_eventbuf_eventmask_event_bits": {32, 2, 1096},
	"pthread_nextevent":                     {64, 1, 1120},
	"pthread_schedpolicy":                   {32, 1, 1076},
	"pthread_schedparam_sched_priority":     {32, 1, 1072},
	"pthread_cancelhandling":                {32, 1, 264},
	"rtld_global__dl_stack_used":            {128, 1, 4248},
	"rtld_global__dl_stack_user":            {128, 1, 4264},
	"rtld_global__dl_tls_dtv_slotinfo_list": {64, 1, 4192},
	"link_map_l_tls_modid":                  {64, 1, 1144},
	"link_map_l_tls_offset":                 {64, 1, 1136},
	"register64":                            {64, 0xffff8840, 104},
	"register32":                            {32, 0xffff8840, 52},
	"__nptl_nthreads":                       {32, 1, 0},
	"__nptl_last_event":                     {64, 1, 0},
	"__nptl_rtld_global":                    {64, 1, 0},
	"__pthread_keys":                        {128, 1024, 0},
	"dtv_dtv":                               {128, 134217727, 0},
	"dtv_slotinfo_gen":                      {64, 1, 0},
	"dtv_slotinfo_list_len":                 {64, 1, 0},
	"dtv_slotinfo_list_next":                {64, 1, 8},
	"dtv_slotinfo_list_slotinfo":            {128, 0, 16},
	"dtv_slotinfo_map":                      {64, 1, 8},
	"dtv_t_counter":                         {64, 1, 0},
	"dtv_t_pointer_val":                     {64, 1, 0},
	"list_t_next":                           {64, 1, 0},
	"list_t_prev":                           {64, 1, 8},
	"pthread_key_data_data":                 {64, 1, 8},
	"pthread_key_data_level2_data":          {128, 32, 0},
	"pthread_key_data_seq":                  {64, 1, 0},
	"pthread_key_struct_destr":              {64, 1, 8},
	"pthread_key_struct_seq":                {64, 1, 0},
	"td_eventbuf_t_eventdata":               {64, 1, 16},
	"td_eventbuf_t_eventnum":                {32, 1, 8},
	"td_thr_events_t_event_bits":            {32, 2, 0},
}

var ppc64SpecSizes = map[string]uint32{
	"pthread": 1856, "list_t": 16, "dtv_slotinfo": 16, "dtv_slotinfo_list": 16, "pthread_key_data": 16,
	"pthread_key_struct": 16, "pthread_key_data_level2": 512, "td_eventbuf_t": 24, "td_thr_events_t": 8,
}

// TestCrossDescriptorsMatchSpec decodes the ppc64 and ppc64le cross libc files (each in its own
// byte order) and checks them against the spec's table.
func TestCrossDescriptorsMatchSpec(t *testing.T) {
	for _, c := range []struct {
		path  string
		order binary.ByteOrder
	}{{ppc64Libc, binary.BigEndian}, {ppc64leLibc, binary.LittleEndian}} {
		t.Run(c.order.String(), func(t *testing.T) {
			lib := readLib(t, c.path)
			if lib.Machine != elf.EM_PPC64 || lib.Order != c.order || lib.PtrSize != 8 || lib.Static || lib.Version != "2.36" {
				t.Fatalf("%s: %v %v ptr %d static=%v version %q", c.path, lib.Machine, lib.Order, lib.PtrSize, lib.Static, lib.Version)
			}
			if n := len(lib.DescNames()); n != 51 {
				t.Errorf("%d descriptor symbols, the spec counts 51", n)
			}
			for name, want := range ppc64Spec {
				if got, ok := lib.Desc(name); !ok || got != want {
					t.Errorf("%s = %v (%v), spec %v", name, got, ok, want)
				}
			}
			for name, want := range ppc64SpecSizes {
				if got, ok := lib.Sizeof(name); !ok || got != want {
					t.Errorf("sizeof %s = %d (%v), spec %d", name, got, ok, want)
				}
			}
			if _, ok := lib.ConstThreadArea(); ok {
				t.Errorf("ppc64 has _thread_db_const_thread_area")
			}
			// The register bias is -(0x7000 + TLS_PRE_TCB_SIZE); the DTV pointer is the last word
			// of tcbhead_t, which ends TLS_PRE_TCB_SIZE bytes after struct pthread begins.
			reg, _ := lib.Desc("register64")
			dtvp, _ := lib.Desc("pthread_dtvp")
			if pre := -reg.Bias() - 0x7000; pre != int64(dtvp.Offset)+8 {
				t.Errorf("TLS_PRE_TCB_SIZE from the register bias = %d; from the DTV pointer = %d", pre, dtvp.Offset+8)
			}
		})
	}
}

// TestDecodeDescByteOrder decodes raw descriptor bytes from the ppc64 file in both byte orders:
// the wrong order must be rejected as byte-swapped, as libthread_db detects it.
func TestDecodeDescByteOrder(t *testing.T) {
	raw := rawSymbol(t, ppc64Libc, "_thread_db_pthread_tid", 12)
	d, err := threaddb.DecodeDesc(raw, binary.BigEndian)
	if err != nil || d != ppc64Spec["pthread_tid"] {
		t.Fatalf("big-endian: %v, %v", d, err)
	}
	if d, err := threaddb.DecodeDesc(raw, binary.LittleEndian); err == nil {
		t.Fatalf("little-endian decode of big-endian bytes accepted: %v", d)
	}
	if _, err := threaddb.DecodeDesc(raw[:11], binary.BigEndian); err == nil {
		t.Fatal("11-byte descriptor accepted")
	}
	if _, err := threaddb.DecodeDesc(make([]byte, 12), binary.BigEndian); err == nil {
		t.Fatal("zero-size descriptor accepted")
	}
}

// rawSymbol reads a symbol's bytes with debug/elf alone (no package code), for seeds and checks.
func rawSymbol(t testing.TB, path, name string, n int) []byte {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	more, _ := f.Symbols()
	for _, s := range append(syms, more...) {
		if s.Name != name || s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		b := make([]byte, n)
		if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return nil
}

// TestReadLibraryErrors checks that files without, or with broken, descriptors give clear errors.
func TestReadLibraryErrors(t *testing.T) {
	if _, err := threaddb.ReadLibrary(bytes.NewReader([]byte("not an ELF file")), threaddb.Module{Path: "junk"}); err == nil || !strings.Contains(err.Error(), "junk") {
		t.Errorf("junk: %v", err)
	}
	progs := buildPrograms(t)
	f, err := os.Open(progs.libtls)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := threaddb.ReadLibrary(f, threaddb.Module{Path: progs.libtls}); err == nil {
		t.Errorf("libtls.so has no descriptors, yet ReadLibrary succeeded")
	}
}
