package agent

import (
	"bytes"
	"os"
	"strconv"
	"testing"
)

// FuzzEnvInt: reading PMI_RANK from an environment block (/proc/PID/environ) never panics, and
// a value it accepts is the value of a PMI_RANK or PMIX_RANK entry.
func FuzzEnvInt(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/environ"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("PATH=/usr/bin\x00PMI_RANK=3\x00PMI_SIZE=4\x00"))
	f.Add([]byte("PMI_RANK=\x00PMI_RANK=2"))
	f.Add([]byte("XPMI_RANK=7\x00PMIX_RANK=-1\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := envInt(b, "PMI_RANK", "PMIX_RANK")
		if !ok {
			return
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			for _, name := range []string{"PMI_RANK=", "PMIX_RANK="} {
				if v, found := bytes.CutPrefix(kv, []byte(name)); found {
					if m, err := strconv.Atoi(string(v)); err == nil && m == n {
						return
					}
				}
			}
		}
		t.Fatalf("envInt(%q) = %d, which no entry holds", b, n)
	})
}
