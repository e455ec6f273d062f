package adapter

import (
	"fmt"
	"path/filepath"
	"strings"
)

// PathRule is one entry of the substitutePath launch and attach argument: From is a directory
// as the editor names it, To the same directory as the debug information records it (where
// the program was built). Source paths in stacks, breakpoints and sources are shown under From;
// breakpoints set under From are looked up under To.
type PathRule struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// pathMap is an ordered list of rules; the first rule that applies wins.
type pathMap []PathRule

// parseSubstitutePath checks the rules: both sides absolute directories.
func parseSubstitutePath(rules []PathRule) (pathMap, error) {
	var m pathMap
	for i, r := range rules {
		if !filepath.IsAbs(r.From) || !filepath.IsAbs(r.To) {
			return nil, fmt.Errorf(`"substitutePath"[%d]: "from" and "to" must be absolute paths, not %q and %q`, i, r.From, r.To)
		}
		m = append(m, PathRule{From: filepath.Clean(r.From), To: filepath.Clean(r.To)})
	}
	return m, nil
}

// toDebug maps a path the editor gives to the path the debug information records.
func (m pathMap) toDebug(p string) string {
	for _, r := range m {
		if rest, ok := under(p, r.From); ok {
			return filepath.Join(r.To, rest)
		}
	}
	return p
}

// toEditor maps a path the debug information records to the editor's.
func (m pathMap) toEditor(p string) string {
	for _, r := range m {
		if rest, ok := under(p, r.To); ok {
			return filepath.Join(r.From, rest)
		}
	}
	return p
}

// under reports whether p lies in directory dir (or is dir), and its path relative to dir.
func under(p, dir string) (string, bool) {
	p = filepath.Clean(p)
	switch {
	case p == dir:
		return "", true
	case dir == "/":
		return p[1:], true
	case strings.HasPrefix(p, dir+"/"):
		return p[len(dir)+1:], true
	}
	return "", false
}
