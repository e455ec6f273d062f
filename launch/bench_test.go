package launch

import (
	"testing"
)

// BenchmarkResolveOpenMPIProgram resolves an Open MPI program's shared libraries (10
// libraries, ld.so.cache read once per Resolver).
func BenchmarkResolveOpenMPIProgram(b *testing.B) {
	prog := program(b, "ompi")
	for b.Loop() {
		if _, err := NewResolver(nil).Resolve(prog); err != nil {
			b.Fatal(err)
		}
	}
}
