package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/launch/mpir"
	"github.com/hpcdap/hpcdap/launch/pmix"
)

// Protocol is how the job layer gets hold of a launched job's ranks.
type Protocol string

// The protocols: "" lets the job layer choose from what the launcher offers.
const (
	// ProtocolMPIR drives the launcher under an agent through its MPIR symbols (Open MPI 4
	// mpirun, srun; a running hydra at known offsets).
	ProtocolMPIR Protocol = "mpir"
	// ProtocolPMIx speaks the PMIx tool interface to the launcher (Open MPI 5 mpirun, PRRTE's
	// prterun and prun), in a tool process of its own.
	ProtocolPMIx Protocol = "pmix"
	// ProtocolFollow follows the launcher's forks and execs with an agent that holds each
	// rank at its exec (MPICH's hydra).
	ProtocolFollow Protocol = "follow"
)

// ParseProtocol checks a protocol name of a request ("" chooses by the launcher).
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(s); p {
	case "", ProtocolMPIR, ProtocolPMIx, ProtocolFollow:
		return p, nil
	}
	return "", fmt.Errorf(`launch protocol %q: want "mpir", "pmix" or "follow" (or none, to choose by the launcher)`, s)
}

// launcherOffer is what a launcher executable offers a tool.
type launcherOffer struct {
	path    string // as given or found on PATH
	family  string // launcherFamily of what path resolves to
	version string // "Open MPI 5.0.7", from --version ("" when it does not say)
	mpir    bool   // the launcher or a library it loads defines the MPIR symbols launch mode needs
	mpirIn  string // where they are
	pmix    string // why the launcher is taken to serve PMIx tools ("" : it is not)
}

// describe names the launcher for messages: "mpirun (Open MPI 5.0.7)".
func (o launcherOffer) describe() string {
	if o.version != "" {
		return fmt.Sprintf("%s (%s)", filepath.Base(o.path), o.version)
	}
	return filepath.Base(o.path)
}

// probeLauncher reads what an Open MPI or PRRTE launcher offers: its MPIR symbols (in its own
// file or a library it loads) and whether it is a PRRTE launcher, which serves PMIx tools.
func probeLauncher(ctx context.Context, path, family string) launcherOffer {
	o := launcherOffer{path: path, family: family, version: launcherVersion(ctx, path)}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	objs := []string{real}
	if deps, err := NewResolver(nil).Resolve(real); err == nil {
		for _, d := range deps {
			objs = append(objs, d.Path)
		}
	}
	for _, obj := range objs {
		base := filepath.Base(obj)
		if s, err := mpir.LookupFile(obj); err == nil && s.Has() {
			o.mpir, o.mpirIn = true, base
		}
		if strings.HasPrefix(base, "libprrte.") && o.pmix == "" {
			o.pmix = "it loads " + base
		}
	}
	if o.pmix == "" && family == "prrte" {
		o.pmix = "a PRRTE launcher"
	}
	if o.pmix == "" && openMPIMajor(o.version) >= 5 {
		// Open MPI 5's mpirun is a front for PRRTE's prterun.
		o.pmix = o.version + " launches through PRRTE"
	}
	return o
}

// openMPIMajor is the major version of an Open MPI launcher's version: "Open MPI 5.0.7" (5.x)
// or "OpenRTE 4.1.4" (up to 4.x); 0 for other launchers.
func openMPIMajor(version string) int {
	v, ok := strings.CutPrefix(version, "Open MPI ")
	if !ok {
		if v, ok = strings.CutPrefix(version, "OpenRTE "); !ok {
			return 0
		}
	}
	major, _, _ := strings.Cut(v, ".")
	n, _ := strconv.Atoi(major)
	return n
}

// versions caches launcherVersion's answers by executable path.
var versions sync.Map

// launcherVersion runs `path --version` and reads the implementation and version from its
// first lines ("mpirun (Open MPI) 5.0.7" → "Open MPI 5.0.7"); "" when it says nothing usable
// within two seconds.
func launcherVersion(ctx context.Context, path string) string {
	if v, ok := versions.Load(path); ok {
		return v.(string)
	}
	v := runVersion(ctx, path)
	if v != "" {
		// Only an answer is kept: a launcher slow to say it (a loaded node) is asked again.
		versions.Store(path, v)
	}
	return v
}

func runVersion(ctx context.Context, path string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	out, _ := cmd.Output()
	for _, line := range strings.Split(string(out), "\n") {
		open, close := strings.IndexByte(line, '('), strings.IndexByte(line, ')')
		if open < 0 || close < open {
			continue
		}
		impl := line[open+1 : close]
		ver := strings.TrimSpace(line[close+1:])
		if f := strings.Fields(ver); len(f) > 0 {
			return impl + " " + f[0]
		}
	}
	return ""
}

// chooseProtocol decides how to launch with a launcher: want when the request names a
// protocol (checked against what the launcher offers), else MPIR where the launcher has its
// symbols, PMIx where it serves tools, fork following for hydra. The reason is said in the
// front end's progress lines.
func chooseProtocol(ctx context.Context, fe *Frontend, path, family string, want Protocol) (Protocol, error) {
	name := filepath.Base(path)
	switch family {
	case "hydra":
		switch want {
		case "", ProtocolFollow:
			return ProtocolFollow, nil
		}
		return "", fmt.Errorf("launch: %s: launch protocol %q: MPICH's hydra is launched by fork following (\"follow\")", name, want)
	case "srun":
		switch want {
		case "", ProtocolMPIR:
			return ProtocolMPIR, nil
		}
		return "", fmt.Errorf("launch: %s: launch protocol %q: srun is launched through MPIR (\"mpir\")", name, want)
	case "openmpi", "prrte":
	default:
		return "", fmt.Errorf("launch: launcher %s (%s): not a launcher the local workload manager knows (mpirun, prterun, prun, mpiexec.hydra)", name, path)
	}
	o := probeLauncher(ctx, path, family)
	pmixWhy := o.pmix
	if pmixWhy != "" && !pmix.Built {
		pmixWhy = ""
	}
	switch want {
	case ProtocolMPIR:
		if !o.mpir {
			return "", fmt.Errorf("launch: %s: launch protocol \"mpir\": no MPIR symbols in it or the libraries it loads", o.describe())
		}
		return ProtocolMPIR, nil
	case ProtocolPMIx:
		if !pmix.Built {
			return "", fmt.Errorf("launch: %s: launch protocol \"pmix\": %s", o.describe(), pmix.ErrNotBuilt)
		}
		if o.mpir && o.pmix == "" {
			// Open MPI 4's mpirun crashes when a PMIx tool connects to it.
			return "", fmt.Errorf("launch: %s: launch protocol \"pmix\": this launcher serves MPIR (in %s), not PMIx tools", o.describe(), o.mpirIn)
		}
		fe.progressf("launch: %s: through the PMIx tool interface (asked for)", o.describe())
		return ProtocolPMIx, nil
	case ProtocolFollow:
		return "", fmt.Errorf("launch: %s: launch protocol \"follow\" is for MPICH's hydra; this launcher speaks MPIR or PMIx", o.describe())
	}
	switch {
	case o.mpir:
		return ProtocolMPIR, nil
	case pmixWhy != "":
		fe.progressf("launch: %s: no MPIR symbols; %s: through the PMIx tool interface", o.describe(), pmixWhy)
		return ProtocolPMIx, nil
	}
	why := "not a PRRTE launcher"
	if o.pmix != "" {
		why = pmix.ErrNotBuilt.Error()
	}
	return "", fmt.Errorf("launch: %s: no MPIR symbols in it or the libraries it loads; PMIx: %s", o.describe(), why)
}
