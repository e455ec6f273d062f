//go:build !(linux && amd64)

package ptrace

import (
	"fmt"
	"os"
	"runtime"

	"github.com/hpcdap/hpcdap/target"
)

var errPlatform = fmt.Errorf("ptrace: not implemented on %s/%s: %w", runtime.GOOS, runtime.GOARCH, target.ErrUnsupported)

// Tracer controls processes with ptrace; on this platform it cannot be created.
type Tracer struct{}

// NewTracer reports that this platform has no ptrace back end.
func NewTracer() (*Tracer, error) { return nil, errPlatform }

// Spawn is not available on this platform.
func (t *Tracer) Spawn(argv, env []string, dir string, stdio []*os.File) (target.Process, error) {
	return nil, errPlatform
}

// SpawnWith is not available on this platform.
func (t *Tracer) SpawnWith(argv, env []string, dir string, stdio []*os.File, opts SpawnOptions) (target.Process, error) {
	return nil, errPlatform
}

// Adopt is not available on this platform.
func (t *Tracer) Adopt(pid int, opts AdoptOptions) (target.Process, error) { return nil, errPlatform }

// Attach is not available on this platform.
func (t *Tracer) Attach(pid int) (target.Process, error) { return nil, errPlatform }

// Close does nothing on this platform.
func (t *Tracer) Close() error { return nil }
