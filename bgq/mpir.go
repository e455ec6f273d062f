package bgq

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/hpcdap/hpcdap/rankset"
)

// HelperSource is the C source of hpcdap-runjob, the process that holds runjob's MPIR symbols
// (MPIR_Breakpoint, MPIR_debug_state, MPIR_proctable, MPIR_proctable_size,
// MPIR_being_debugged, MPIR_executable_path[256], MPIR_server_arguments[1024],
// MPIR_subset_attach[4096]) and starts `hpcdap bgq runjob` as its child, which drives it
// over two pipes (MPIR). The build places it beside the hpcdap binary.
//
//go:embed helper/runjob.c
var HelperSource []byte

// HelperName is the helper's file name beside the hpcdap binary.
const HelperName = "hpcdap-runjob"

// MPIRFDsEnv names the environment variable through which the helper gives its child the
// request and reply descriptors ("3,4").
const MPIRFDsEnv = "HPCDAP_BGQ_MPIR_FDS"

// MPIR debug states (MPIR_debug_state).
const (
	DebugNull     = 0
	DebugSpawned  = 1
	DebugAborting = 2
)

// Sizes of runjob's MPIR tool arrays.
const (
	ExecutablePathSize  = 256
	ServerArgumentsSize = 1024
	SubsetAttachSize    = 4096
)

// MPIR is the emulator's side of the pipes to hpcdap-runjob.
type MPIR struct {
	w io.Writer
	r *bufio.Reader
}

// NewMPIR drives the helper through w (requests) and r (replies).
func NewMPIR(w io.Writer, r io.Reader) *MPIR { return &MPIR{w: w, r: bufio.NewReader(r)} }

// MPIRFromEnv opens the descriptors MPIRFDsEnv names; ok is false when it is not set (runjob
// was not started by the helper).
func MPIRFromEnv() (m *MPIR, ok bool, err error) {
	v := os.Getenv(MPIRFDsEnv)
	if v == "" {
		return nil, false, nil
	}
	a, b, found := strings.Cut(v, ",")
	wfd, err1 := strconv.Atoi(a)
	rfd, err2 := strconv.Atoi(b)
	if !found || err1 != nil || err2 != nil || wfd < 3 || rfd < 3 {
		return nil, true, fmt.Errorf("%s=%q: want two descriptors, such as 3,4", MPIRFDsEnv, v)
	}
	os.Unsetenv(MPIRFDsEnv) // not for the compute nodes and tools
	return NewMPIR(os.NewFile(uintptr(wfd), "mpir-requests"), os.NewFile(uintptr(rfd), "mpir-replies")), true, nil
}

// request sends one request line and reads the one-line answer.
func (m *MPIR) request(line string) (string, error) {
	if _, err := io.WriteString(m.w, line+"\n"); err != nil {
		return "", fmt.Errorf("mpir: %s: %w", firstWord(line), err)
	}
	s, err := m.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("mpir: %s: %w", firstWord(line), err)
	}
	return strings.TrimSuffix(s, "\n"), nil
}

func firstWord(s string) string { w, _, _ := strings.Cut(s, " "); return w }

// ok sends a request whose answer is "ok".
func (m *MPIR) ok(line string) error {
	s, err := m.request(line)
	if err == nil && s != "ok" {
		err = fmt.Errorf("mpir: %s: the helper answered %q", firstWord(line), s)
	}
	return err
}

// BeingDebugged reads MPIR_being_debugged.
func (m *MPIR) BeingDebugged() (bool, error) {
	s, err := m.request("debugged")
	if err != nil {
		return false, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return false, fmt.Errorf("mpir: MPIR_being_debugged: %q", s)
	}
	return n != 0, nil
}

// ToolRequest is what a tool wrote in runjob's tool arrays.
type ToolRequest struct {
	Path   string   // MPIR_executable_path
	Args   []string // MPIR_server_arguments
	Subset string   // MPIR_subset_attach, as written
}

// ReadTool reads the tool arrays raw; ParseToolRequest checks them.
func (m *MPIR) ReadTool() (path, args, subset []byte, err error) {
	if _, err := io.WriteString(m.w, "tool\n"); err != nil {
		return nil, nil, nil, fmt.Errorf("mpir: tool: %w", err)
	}
	b := make([]byte, ExecutablePathSize+ServerArgumentsSize+SubsetAttachSize)
	if _, err := io.ReadFull(m.r, b); err != nil {
		return nil, nil, nil, fmt.Errorf("mpir: tool: %w", err)
	}
	return b[:ExecutablePathSize], b[ExecutablePathSize : ExecutablePathSize+ServerArgumentsSize], b[ExecutablePathSize+ServerArgumentsSize:], nil
}

// ParseToolRequest decodes the three arrays: a NUL-terminated path shorter than 256 bytes, a
// list of NUL-terminated arguments ended by an empty one (a double NUL) within 1,024 bytes,
// and a subset in MPIR notation (checked against the job's np ranks, "max" and "$max" the
// last rank).
func ParseToolRequest(path, args, subset []byte, np int) (ToolRequest, error) {
	var r ToolRequest
	i := bytes.IndexByte(path, 0)
	switch {
	case i < 0:
		return r, fmt.Errorf("MPIR_executable_path: no NUL within %d bytes: the path must be shorter than %d bytes", len(path), ExecutablePathSize)
	case i == 0:
		return r, errors.New("MPIR_executable_path is empty")
	}
	r.Path = string(path[:i])
	for rest := args; ; {
		j := bytes.IndexByte(rest, 0)
		if j < 0 {
			return r, fmt.Errorf("MPIR_server_arguments: no terminating empty argument (double NUL) within %d bytes", ServerArgumentsSize)
		}
		if j == 0 {
			break
		}
		r.Args = append(r.Args, string(rest[:j]))
		rest = rest[j+1:]
	}
	k := bytes.IndexByte(subset, 0)
	if k < 0 {
		return r, fmt.Errorf("MPIR_subset_attach: no NUL within %d bytes", SubsetAttachSize)
	}
	r.Subset = string(subset[:k])
	if _, err := ParseSubset(r.Subset, np); err != nil {
		return r, err
	}
	return r, nil
}

// maxWord is "max" standing alone as a rank of a subset item.
var maxWord = regexp.MustCompile(`(^|[\s,:-])max($|[\s,:-])`)

// ParseSubset reads MPIR_subset_attach for a job of np ranks: the MPIR subset notation
// ("1 2 4-6 7-$max:2"), in which BG/Q also spells the last rank "max". Empty means every rank.
func ParseSubset(s string, np int) (rankset.Set, error) {
	if strings.TrimSpace(s) == "" {
		return rankset.All(np), nil
	}
	norm := s
	for maxWord.MatchString(norm) {
		norm = maxWord.ReplaceAllString(norm, "${1}$$max${2}")
	}
	set, err := rankset.Parse(norm, np)
	if err == nil && set.Empty() {
		err = errors.New("names no rank")
	}
	if err != nil {
		return rankset.Set{}, fmt.Errorf("MPIR_subset_attach %q: %w", s, err)
	}
	return set, nil
}

// SetProctable fills MPIR_proctable and MPIR_proctable_size.
func (m *MPIR) SetProctable(t []Proc) error {
	var b strings.Builder
	fmt.Fprintf(&b, "table %d", len(t))
	for _, p := range t {
		if strings.ContainsAny(p.Host+p.Executable, "\t\n") {
			return fmt.Errorf("mpir: proc table: rank %d: a tab or newline in %q or %q", p.Rank, p.Host, p.Executable)
		}
		fmt.Fprintf(&b, "\n%s\t%s\t%d", p.Host, p.Executable, p.Node)
	}
	return m.ok(b.String())
}

// Breakpoint sets MPIR_debug_state and calls MPIR_Breakpoint; it returns when the tool has let
// runjob go on. For DebugAborting, abort is MPIR_debug_abort_string.
func (m *MPIR) Breakpoint(state int, abort string) error {
	if state == DebugAborting {
		if err := m.ok("abort " + strings.ReplaceAll(abort, "\n", " ")); err != nil {
			return err
		}
	}
	return m.ok("break " + strconv.Itoa(state))
}
