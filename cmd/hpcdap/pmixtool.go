package main

import (
	"io"
	"os"

	"github.com/hpcdap/hpcdap/launch/pmix"
)

// runPMIxTool serves one job's PMIx tool for the front end (hidden: the front end starts it):
// requests on standard input, events on file descriptor 3.
func runPMIxTool(args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		return errUsage
	}
	return pmix.ServeTool(os.Stdin, os.NewFile(3, "events"))
}
