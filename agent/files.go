package agent

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/hpcdap/hpcdap/cdti"
)

// The file commands (GetFilenames, GetFileStatData, GetFileContents) read the CNK's persistent
// memory file system. The agent serves the session's staging directory in its place, and
// nothing outside it: a pathname is relative to the staging directory or absolute inside it;
// it may not contain "..", and symbolic links are followed only while they stay inside.

// stagingFiles lists the regular files under the staging directory, relative to it, sorted;
// names that do not fit a pathname field are left out, and at most MaxPersistPathnames are
// listed.
func (a *Agent) stagingFiles() []string {
	if a.staging == "" {
		return nil
	}
	var names []string
	filepath.WalkDir(a.staging, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(a.staging, path)
		if err != nil || len(rel) >= cdti.MaxPersistPathnameSize {
			return nil
		}
		names = append(names, rel)
		return nil
	})
	sort.Strings(names)
	if len(names) > cdti.MaxPersistPathnames {
		names = names[:cdti.MaxPersistPathnames]
	}
	return names
}

// errOutside: a pathname that leaves the staging directory.
var errOutside = errors.New("pathname outside the staging directory")

// stagingPath resolves a pathname of a file command to a path inside the staging directory.
func (a *Agent) stagingPath(name string) (string, error) {
	if a.staging == "" {
		return "", fs.ErrNotExist
	}
	if name == "" || strings.ContainsRune(name, 0) {
		return "", errOutside
	}
	for _, part := range strings.Split(filepath.ToSlash(name), "/") {
		if part == ".." {
			return "", errOutside
		}
	}
	root, err := filepath.EvalSymlinks(a.staging)
	if err != nil {
		return "", err
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return "", err
	}
	var p string
	if filepath.IsAbs(name) {
		p = filepath.Clean(name)
		if !within(p, root) && !within(p, filepath.Clean(a.staging)) {
			return "", errOutside
		}
	} else {
		p = filepath.Join(root, name)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", err
	}
	if !within(real, root) {
		return "", errOutside
	}
	return real, nil
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// fileCode maps a file error to a CDTI command code.
func fileCode(err error) cdti.CmdReturnCode {
	if errors.Is(err, fs.ErrNotExist) {
		return cdti.CmdFileNotFound
	}
	return cdti.CmdParmErr
}

// fileStat answers GetFileStatData.
func (a *Agent) fileStat(name string) (cdti.Stat64, cdti.CmdReturnCode) {
	p, err := a.stagingPath(name)
	if err != nil {
		return cdti.Stat64{}, fileCode(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return cdti.Stat64{}, fileCode(err)
	}
	return cdti.Stat64{
		Dev: uint64(st.Dev), Ino: st.Ino, Nlink: uint64(st.Nlink), Mode: st.Mode, UID: st.Uid, GID: st.Gid,
		Rdev: uint64(st.Rdev), Size: st.Size, Blksize: int64(st.Blksize), Blocks: st.Blocks,
		Atim: cdti.Timespec{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		Mtim: cdti.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
		Ctim: cdti.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec},
	}, cdti.CmdSuccess
}

// fileContents answers GetFileContents: at most MaxMemorySize bytes from offset (fewer at the
// end of the file).
func (a *Agent) fileContents(name string, off, n uint64) ([]byte, cdti.CmdReturnCode) {
	if n > cdti.MaxMemorySize {
		return nil, cdti.CmdLngthErr
	}
	p, err := a.stagingPath(name)
	if err != nil {
		return nil, fileCode(err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fileCode(err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, cdti.CmdParmErr
	}
	if off > 1<<62 {
		return nil, cdti.CmdParmErr
	}
	buf := make([]byte, n)
	k, err := f.ReadAt(buf, int64(off))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, cdti.CmdParmErr
	}
	return buf[:k], cdti.CmdSuccess
}
