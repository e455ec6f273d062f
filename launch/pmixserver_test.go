package launch

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPMIxServerOfIgnoresRankChildren: a rank's own children (system(), a wrapper script that
// does not exec) inherit PMIX_NAMESPACE; the job's server is still the one parent of its
// processes that is not in the namespace itself.
func TestPMIxServerOfIgnoresRankChildren(t *testing.T) {
	nspace := "hpcdap-test-" + strconv.Itoa(os.Getpid()) + "@1"
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30 & wait")
	cmd.Env = append(os.Environ(), "PMIX_NAMESPACE="+nspace)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		exec.Command("pkill", "-P", strconv.Itoa(cmd.Process.Pid)).Run()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// The shell and its two children are in the namespace once both have started.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid)).Output()
		if len(strings.Fields(string(out))) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell's children did not start: %q", out)
		}
	}
	server, err := PMIxServerOf(nspace)
	if err != nil || server != os.Getpid() {
		t.Fatalf("PMIxServerOf(%s) = %d, %v; want this process, %d", nspace, server, err, os.Getpid())
	}
}
