package adapter

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestOfficialClient drives the built `hpcdap dap` with Microsoft's DAP test client,
// @vscode/debugadapter-testsupport, through mocha (testdata/dapclient-js): the same scenarios
// as the Go conversations, seen by the client VS Code's own adapters are tested with.
func TestOfficialClient(t *testing.T) {
	t.Parallel()
	needTool(t, "node")
	npm := needTool(t, "npm")
	needTool(t, "gcc")
	needTool(t, "gdb")
	dir, _ := filepath.Abs(filepath.Join("testdata", "dapclient-js"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@vscode", "debugadapter-testsupport")); err != nil {
		// Install the pinned client (package-lock.json); make deps does this ahead of time.
		ci := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		ci.Dir = dir
		if out, err := ci.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s (needs the npm registry once): %v\n%s", dir, err, out)
		}
	}
	mocha := exec.Command(filepath.Join(dir, "node_modules", ".bin", "mocha"), "--timeout", "60000", "--reporter", "dot", "test/hpcdap.test.js")
	mocha.Dir = dir
	mocha.Env = append(os.Environ(), "HPCDAP_BIN="+hpcdapBinary(t))
	out, err := mocha.CombinedOutput()
	if err != nil {
		t.Fatalf("mocha: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
