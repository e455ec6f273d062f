package symbols

import (
	"debug/elf"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestProgHeader checks Binary.ProgHeader against readelf's program headers for a PIE and a
// static executable (which has no PT_DYNAMIC and no PT_INTERP).
func TestProgHeader(t *testing.T) {
	needTool(t, "readelf")
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		flags []string
	}{{"pie", []string{"-pie", "-fPIE"}}, {"static", []string{"-static"}}} {
		t.Run(tc.name, func(t *testing.T) {
			exe := buildCrash(t, dir, tc.name, tc.flags...)
			out, err := exec.Command("readelf", "-lW", exe).Output()
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][2]uint64{} // type → (vaddr, memsz), first of each
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				if len(f) < 6 || !strings.HasPrefix(f[1], "0x") {
					continue
				}
				if _, seen := want[f[0]]; !seen {
					va, _ := strconv.ParseUint(f[2], 0, 64)
					ms, _ := strconv.ParseUint(f[5], 0, 64)
					want[f[0]] = [2]uint64{va, ms}
				}
			}
			b, err := Open(exe, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for name, typ := range map[string]elf.ProgType{"PHDR": elf.PT_PHDR, "DYNAMIC": elf.PT_DYNAMIC,
				"INTERP": elf.PT_INTERP, "LOAD": elf.PT_LOAD} {
				p, ok := b.ProgHeader(typ)
				w, has := want[name]
				if ok != has || ok && (p.Vaddr != w[0] || p.Memsz != w[1]) {
					t.Errorf("%s: %+v (found %v); readelf says %#x size %#x (found %v)", name, p, ok, w[0], w[1], has)
				}
			}
			if _, ok := b.ProgHeader(elf.PT_DYNAMIC); ok == (tc.name == "static") {
				t.Errorf("%s executable: PT_DYNAMIC found %v", tc.name, ok)
			}
		})
	}
}
