package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestPMIxDaemonLogElsewhere: the --log file is the front end's, on its host; a daemon on a
// node where its directory does not exist keeps the launcher's standard error and goes on to
// read its ranks, instead of failing over the log.
func TestPMIxDaemonLogElsewhere(t *testing.T) {
	var stdout, stderr bytes.Buffer
	log := filepath.Join(t.TempDir(), "not-on-this-node", "agents.log")
	err := runPMIxDaemon([]string{"--log", log, "--", "/bin/true"}, &stdout, &stderr)
	if err == nil {
		t.Fatal("pmix-daemon outside a PMIx job succeeded")
	}
	if strings.Contains(err.Error(), "log") || !strings.Contains(stderr.String(), "output stays on the launcher's") {
		t.Errorf("pmix-daemon with a log it cannot open: %v; stderr %q", err, stderr.String())
	}
}
