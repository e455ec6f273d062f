package launch

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Manifest is a list of files to ship into a session: binaries (bin/), libraries (lib/), library
// directories (lib/NAME/) and plain files (the session root). Adding a binary or a library also
// adds the shared libraries it needs, found as the dynamic linker finds them, except glibc's own
// libraries and the dynamic linker, which must come from the node's C library.
type Manifest struct {
	s       *Session
	files   map[string]string // path in the session → source path
	libDirs []string          // lib/NAME directories to add to LD_LIBRARY_PATH
	res     *Resolver
}

// ManifestFile is one file of a manifest.
type ManifestFile struct {
	Dest   string // relative to the session directory
	Source string // absolute path on the front end
}

// NewManifest returns an empty manifest for the session.
func (s *Session) NewManifest() *Manifest {
	return &Manifest{s: s, files: map[string]string{}, res: NewResolver(nil)}
}

// glibcLibs are the libraries that belong to the C library: shipping them next to a node's own
// dynamic linker would mix versions.
var glibcLibs = map[string]bool{
	"libc.so.6": true, "libm.so.6": true, "libpthread.so.0": true, "libdl.so.2": true, "librt.so.1": true,
	"libresolv.so.2": true, "libutil.so.1": true, "libanl.so.1": true, "libmvec.so.1": true,
	"libBrokenLocale.so.1": true, "libthread_db.so.1": true, "libc_malloc_debug.so.0": true,
	"libnss_files.so.2": true, "libnss_dns.so.2": true, "libnsl.so.1": true,
}

func isSystemLib(d Dependency) bool {
	return d.NeededBy == "" || glibcLibs[d.Name] || strings.HasPrefix(d.Name, "ld-linux")
}

// add records a file, refusing two different sources for one destination.
func (m *Manifest) add(dest, src string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	if prev, ok := m.files[dest]; ok && !samePath(prev, abs) {
		return fmt.Errorf("launch: manifest: %s would come from both %s and %s", dest, prev, abs)
	}
	m.files[dest] = abs
	return nil
}

// samePath reports whether two paths name the same file.
func samePath(a, b string) bool {
	if a == b {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// AddBinary adds an executable (a path, or a name looked up in PATH) as bin/NAME, and the
// libraries it needs as lib/SONAME.
func (m *Manifest) AddBinary(path string) error {
	p := path
	if !strings.Contains(p, "/") {
		lp, err := lookPath(p)
		if err != nil {
			return fmt.Errorf("launch: manifest: binary %s: %w", path, err)
		}
		p = lp
	}
	if err := regularFile(p); err != nil {
		return fmt.Errorf("launch: manifest: binary %s: %w", path, err)
	}
	if err := m.add("bin/"+filepath.Base(p), p); err != nil {
		return err
	}
	return m.addDeps(p)
}

// AddLibrary adds a shared library as lib/NAME, and the libraries it needs.
func (m *Manifest) AddLibrary(path string) error {
	if err := regularFile(path); err != nil {
		return fmt.Errorf("launch: manifest: library %s: %w", path, err)
	}
	if err := m.add("lib/"+filepath.Base(path), path); err != nil {
		return err
	}
	return m.addDeps(path)
}

func (m *Manifest) addDeps(path string) error {
	deps, err := m.res.Resolve(path)
	if err != nil {
		return fmt.Errorf("launch: manifest: %w", err)
	}
	for _, d := range deps {
		if isSystemLib(d) {
			continue
		}
		if err := m.add("lib/"+d.Name, d.Path); err != nil {
			return err
		}
	}
	return nil
}

// AddLibDir adds every regular file under a directory as lib/NAME/..., NAME being the
// directory's base name; the daemons' LD_LIBRARY_PATH then includes lib/NAME.
func (m *Manifest) AddLibDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("launch: manifest: library directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("launch: manifest: library directory %s: not a directory", dir)
	}
	base := "lib/" + filepath.Base(filepath.Clean(dir))
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			if d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			if regularFile(p) != nil {
				return nil
			}
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return m.add(base+"/"+filepath.ToSlash(rel), p)
	})
	if err != nil {
		return fmt.Errorf("launch: manifest: library directory %s: %w", dir, err)
	}
	m.libDirs = append(m.libDirs, base)
	return nil
}

// AddFile adds a file to the session root under its base name.
func (m *Manifest) AddFile(path string) error {
	if err := regularFile(path); err != nil {
		return fmt.Errorf("launch: manifest: file %s: %w", path, err)
	}
	return m.add(filepath.Base(path), path)
}

// Files lists the manifest's files by destination.
func (m *Manifest) Files() []ManifestFile {
	out := make([]ManifestFile, 0, len(m.files))
	for d, s := range m.files {
		out = append(out, ManifestFile{Dest: d, Source: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dest < out[j].Dest })
	return out
}

func regularFile(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	return nil
}
