//go:build !(cgo && pmix)

package pmix

import (
	"errors"
	"io"
	"os"
)

// Built reports whether this binary holds the PMIx tool.
const Built = false

// errNotBuilt is what a PMIx launch gets from a binary built without libpmix.
var errNotBuilt = errors.New("this hpcdap was built without PMIx (build with libpmix: make build)")

// ServeTool would serve the tool protocol; without libpmix it fails at once.
func ServeTool(stdin io.Reader, events *os.File) error {
	return errNotBuilt
}
