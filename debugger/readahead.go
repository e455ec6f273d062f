package debugger

import (
	"log"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/symbols"
)

// readAhead opens a launched program and the libraries it loads at start-up (its DT_NEEDED
// closure, resolved as the dynamic linker does with the launch's LD_LIBRARY_PATH) into the
// symbol cache, while the launcher starts the job. The ranks are held from the moment they
// are attached until their symbols are read, and a rank that a launcher holds inside
// MPI_Init has every library mapped already: reading libc's debugging information then
// would keep them held for as long again. The cache is keyed by file and build-id, so what
// is read here is what the ranks' own reads find (or wait for, if it is still being read);
// a library the ranks load from elsewhere is read then, as without this. Errors are left to
// those reads to report; a panic in a read is logged, and that read is left to the ranks.
func readAhead(syms *symbols.Cache, req launch.Request, logger *log.Logger) {
	defer func() {
		if p := recover(); p != nil && logger != nil {
			logger.Printf("adapter: read ahead the symbols of %s: internal error: %v\n%s", req.Program, p, debug.Stack())
		}
	}()
	prog := req.Program
	if prog == "" {
		return
	}
	if !filepath.IsAbs(prog) && req.Dir != "" {
		prog = filepath.Join(req.Dir, prog)
	}
	var env []string
	for _, kv := range append(os.Environ(), req.Env...) {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(req.Unset, name) {
			env = append(env, kv)
		}
	}
	syms.Open(prog)
	deps, _ := launch.NewResolver(env).Resolve(prog)
	for _, d := range deps {
		syms.Open(d.Path)
	}
}
