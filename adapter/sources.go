package adapter

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/google/go-dap"
)

// sourceCache remembers which source paths exist on this machine. Frames in libraries built
// elsewhere (libc's "../sysdeps/…", a build tree's absolute paths) name files the front end
// cannot open; sending such a path makes the client try to open it and report an error, so
// those sources go out without a path, de-emphasised, with the recorded name kept visible.
// Paths recorded where the program was built are first mapped to the editor's (paths, the
// substitutePath argument).
type sourceCache struct {
	paths  pathMap // set once, before the job starts
	mu     sync.Mutex
	exists map[string]bool
}

// source returns the DAP source for a file recorded in the debug information.
func (c *sourceCache) source(file string) *dap.Source {
	local := c.paths.toEditor(file)
	if c.readable(local) {
		return &dap.Source{Name: filepath.Base(local), Path: local}
	}
	origin := "not on this machine: " + file
	if local != file {
		origin += " (mapped to " + local + ")"
	}
	return &dap.Source{
		Name:             filepath.Base(file),
		Origin:           origin,
		PresentationHint: "deemphasize",
	}
}

func (c *sourceCache) readable(file string) bool {
	if !filepath.IsAbs(file) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok, seen := c.exists[file]; seen {
		return ok
	}
	if c.exists == nil {
		c.exists = map[string]bool{}
	}
	st, err := os.Stat(file)
	ok := err == nil && st.Mode().IsRegular()
	c.exists[file] = ok
	return ok
}
