package mpir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
)

// ToolDaemons asks the starter to co-spawn the tool's daemons (MPIR's tool daemon launch
// extension, which Open MPI 4's orterun and BG/Q's runjob implement): once it has loaded the
// job, and before MPIR_Breakpoint, it starts Path with Args on each of the job's nodes (on
// BG/Q, on each I/O node of the job).
type ToolDaemons struct {
	Path string
	Args []string
	// Subset is BG/Q's MPIR_subset_attach: the ranks the daemons are to control, in the
	// subset notation ("1 2 4-6 7-$max:2"); "" leaves the array empty (every rank).
	Subset string
}

// ErrNoDaemonLaunch means the starter offers no tool daemon launch (no MPIR_executable_path).
var ErrNoDaemonLaunch = errors.New("the launcher offers no tool daemon launch (no MPIR_executable_path)")

// EncodeServerArguments lays args out as MPIR_server_arguments holds them: each argument
// followed by a NUL, the list ended by an empty one (a second NUL). An argument that is empty
// or holds a NUL cannot be carried (it would end the list early) and is an error.
func EncodeServerArguments(args []string) ([]byte, error) {
	var b bytes.Buffer
	for i, a := range args {
		if a == "" {
			return nil, fmt.Errorf("mpir: server argument %d is empty, which would end the list", i)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("mpir: server argument %d (%q) holds a NUL byte", i, a)
		}
		b.WriteString(a)
		b.WriteByte(0)
	}
	b.WriteByte(0)
	return b.Bytes(), nil
}

// DecodeServerArguments reads an MPIR_server_arguments array: arguments up to the first empty
// one. An array that ends before the empty argument is an error (the starter would read past
// it).
func DecodeServerArguments(b []byte) ([]string, error) {
	var out []string
	for {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return nil, fmt.Errorf("mpir: server arguments: no terminating empty argument after %d argument(s)", len(out))
		}
		if i == 0 {
			return out, nil
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
}

// arrays are d's three arrays as the starter is to hold them, checked against the sizes its
// symbols give (a size the starter does not record is taken as the BG/Q runjob's).
func (d *ToolDaemons) arrays(syms *Symbols) (path, args, subset []byte, err error) {
	if syms.ExecutablePath == 0 || syms.ServerArguments == 0 {
		return nil, nil, nil, ErrNoDaemonLaunch
	}
	if d.Path == "" || strings.IndexByte(d.Path, 0) >= 0 {
		return nil, nil, nil, fmt.Errorf("mpir: tool daemon path %q: not a path", d.Path)
	}
	size := func(n, bgq int) int {
		if n > 0 {
			return n
		}
		return bgq
	}
	path = append([]byte(d.Path), 0)
	if n := size(syms.ExecutablePathSize, 256); len(path) > n {
		return nil, nil, nil, fmt.Errorf("mpir: tool daemon path of %d bytes does not fit the launcher's MPIR_executable_path[%d]", len(d.Path), n)
	}
	if args, err = EncodeServerArguments(d.Args); err != nil {
		return nil, nil, nil, err
	}
	if n := size(syms.ServerArgumentsSize, 1024); len(args) > n {
		return nil, nil, nil, fmt.Errorf("mpir: tool daemon arguments of %d bytes (NUL-separated) do not fit the launcher's MPIR_server_arguments[%d]", len(args), n)
	}
	if d.Subset != "" {
		if syms.SubsetAttach == 0 {
			return nil, nil, nil, errors.New("mpir: the launcher takes no rank subset (no MPIR_subset_attach)")
		}
		subset = append([]byte(d.Subset), 0)
		if n := size(syms.SubsetAttachSize, 4096); len(subset) > n {
			return nil, nil, nil, fmt.Errorf("mpir: rank subset of %d bytes does not fit the launcher's MPIR_subset_attach[%d]", len(d.Subset), n)
		}
	}
	return path, args, subset, nil
}

// writeDaemons writes d into the stopped starter's arrays.
func (s *Starter) writeDaemons(ctx context.Context, d *ToolDaemons) error {
	path, args, subset, err := d.arrays(s.syms)
	if err != nil {
		return err
	}
	for _, w := range []struct {
		what string
		addr uint64
		b    []byte
	}{{SymExecutablePath, s.syms.ExecutablePath, path}, {SymServerArguments, s.syms.ServerArguments, args},
		{SymSubsetAttach, s.syms.SubsetAttach, subset}} {
		if len(w.b) == 0 {
			continue
		}
		if err := s.c.WriteMemory(ctx, s.rank, 0, w.addr, w.b, 0, 0); err != nil {
			return fmt.Errorf("mpir: set %s: %w", w.what, err)
		}
	}
	return nil
}
