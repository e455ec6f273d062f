package adapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/launch"
	"github.com/hpcdap/hpcdap/topology"
)

// LaunchArgs are the launch request's arguments (README, "DAP interface").
type LaunchArgs struct {
	Program      string             `json:"program"`
	Args         []string           `json:"args"`
	Cwd          string             `json:"cwd"`
	Env          map[string]*string `json:"env"` // a null value removes the variable
	Np           *int               `json:"np"`
	Launcher     string             `json:"launcher"`
	LauncherArgs []string           `json:"launcherArgs"`
	// LaunchProtocol overrides how the ranks of an MPI launcher are reached: "mpir", "pmix"
	// or "follow" ("": chosen from what the launcher offers).
	LaunchProtocol string `json:"launchProtocol"`
	StopAtEntry    bool   `json:"stopAtEntry"`
	StopMode       string `json:"stopMode"`
	Ranks          string `json:"ranks"`
	CoreFile       string `json:"coreFile"`
	Emulator       string `json:"emulator"`
	// DisableASLR runs local ranks without address-space randomisation (default true), so that
	// every rank of one binary has the same addresses, as gdb and lldb do by default.
	DisableASLR *bool `json:"disableASLR"`
	// NoDebug runs the program without debugging (VS Code's "Run Without Debugging").
	NoDebug bool `json:"noDebug"`
	// SubstitutePath maps source directories between the editor and the debug information.
	SubstitutePath []PathRule `json:"substitutePath"`
	// CallTimeout bounds a function call in an expression, in seconds (default 10).
	CallTimeout *float64 `json:"callTimeout"`
	// SessionName shares the session under this name: other clients of the same user may
	// join it (attach with JoinSession).
	SessionName string `json:"sessionName"`
	// Fanout is the fan-out of the agents' tree (default 32, at least 2): a job of more
	// agents than the fan-out is reached through a tree of them.
	Fanout *int `json:"fanout"`
	// RanksPerAgent is how many ranks each agent serves (default and most 64): a node of
	// more ranks has an agent per group of them, so that a job of few hosts can have several
	// agents (and with Fanout a deeper tree of them).
	RanksPerAgent *int `json:"ranksPerAgent"`
	// ToolPriority is the CDTI priority the session attaches to the ranks with (1–99, default
	// 90): where other tools are attached to the same ranks (a BG/Q job's), the highest
	// priority takes control authority.
	ToolPriority *int `json:"toolPriority"`
}

// AttachArgs are the attach request's arguments.
type AttachArgs struct {
	Pid         *int           `json:"pid"`
	Pids        map[string]int `json:"pids"`
	LauncherPid *int           `json:"launcherPid"`
	SlurmJob    string         `json:"slurmJob"`
	// PMIxNamespace attaches the job of that PMIx namespace, whose launcher (or node daemon)
	// runs on this host.
	PMIxNamespace string `json:"pmixNamespace"`
	// ProcessName attaches the one process of this host that runs this program (an
	// executable's base name, or with a slash its path); with WaitFor, the first one that
	// starts after the request, waited for up to Timeout seconds (default 30).
	ProcessName string   `json:"processName"`
	WaitFor     bool     `json:"waitFor"`
	Timeout     *float64 `json:"timeout"`
	Program     string   `json:"program"`
	StopMode    string   `json:"stopMode"`
	Ranks       string   `json:"ranks"`
	StopAtEntry bool     `json:"stopAtEntry"`
	// SubstitutePath maps source directories between the editor and the debug information.
	SubstitutePath []PathRule `json:"substitutePath"`
	// SessionName shares the session under this name (as launch's).
	SessionName string `json:"sessionName"`
	// JoinSession joins the running shared session of this name instead of attaching to
	// processes: the job another client launched or attached.
	JoinSession string `json:"joinSession"`
	// Fanout is the fan-out of the agents' tree, as for launch.
	Fanout *int `json:"fanout"`
	// RanksPerAgent is how many ranks each node agent serves, as for launch, for an attach
	// through a launcher or a Slurm step.
	RanksPerAgent *int `json:"ranksPerAgent"`
	// ToolPriority is the CDTI priority of the session's tool, as for launch.
	ToolPriority *int `json:"toolPriority"`
}

// maxSessionName bounds the length of a session name.
const maxSessionName = 64

// checkSessionName checks a sessionName or joinSession argument: 1 to 64 characters, letters,
// digits and "._-".
func checkSessionName(field, name string) error {
	if name == "" || len(name) > maxSessionName {
		return fmt.Errorf(`%q must be 1 to %d characters, not %d`, field, maxSessionName, len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf(`%s %q: use letters, digits, ".", "_" and "-" only`, field, name)
		}
	}
	return nil
}

// joinPlan returns the name of the session an attach joins ("" when it attaches to
// processes) and the client's path rules, refusing the arguments that a join cannot take.
func joinPlan(raw json.RawMessage) (string, pathMap, error) {
	var a AttachArgs
	if err := decodeArgs(raw, &a); err != nil {
		return "", nil, err
	}
	if a.JoinSession == "" {
		return "", nil, nil
	}
	if err := checkSessionName("joinSession", a.JoinSession); err != nil {
		return "", nil, err
	}
	if a.Pid != nil || a.Pids != nil || a.LauncherPid != nil || a.SlurmJob != "" || a.PMIxNamespace != "" ||
		a.ProcessName != "" || a.SessionName != "" || a.StopMode != "" || a.Ranks != "" || a.StopAtEntry || a.Fanout != nil || a.RanksPerAgent != nil || a.ToolPriority != nil {
		return "", nil, errors.New(`"joinSession" joins a running job as it is: give none of "pid", "pids", "launcherPid", ` +
			`"slurmJob", "pmixNamespace", "processName", "sessionName", "stopMode", "ranks", "stopAtEntry", "fanout", "ranksPerAgent" and "toolPriority" with it`)
	}
	paths, err := parseSubstitutePath(a.SubstitutePath)
	return a.JoinSession, paths, err
}

// parseFanout checks the fanout argument; nil gives 0, the default.
func parseFanout(n *int) (int, error) {
	if n == nil {
		return 0, nil
	}
	if *n < topology.MinFanout {
		return 0, fmt.Errorf(`"fanout" must be at least %d (a tree, not a chain), not %d`, topology.MinFanout, *n)
	}
	return *n, nil
}

func parseStopMode(s string) (debugger.StopMode, error) {
	switch s {
	case "", "all":
		return debugger.StopAll, nil
	case "rank":
		return debugger.StopRank, nil
	case "thread":
		return debugger.StopThread, nil
	}
	return 0, fmt.Errorf(`stopMode %q: want "all", "rank" or "thread"`, s)
}

// errNotYet marks an argument whose back end comes later; the error response says so.
var errNotYet = errors.New("not yet supported")

// launchPlan is a validated launch request.
type launchPlan struct {
	program     string
	args        []string
	cwd         string
	env         []string
	np          int
	stopAtEntry bool
	mode        debugger.StopMode
	focus       string
	coreFile    string
	noASLR      bool
	noDebug     bool
	emulator    string // "qemu-ppc64" or "qemu-ppc64le": the ranks run under QEMU user mode
	paths       pathMap
	callTimeout time.Duration
	sessionName string // shared under this name
	fanout      int    // the agents' tree (0: the default)
	perAgent    int    // ranks per agent (0: launch.RanksPerAgent)
	priority    uint8  // the CDTI priority of the session's tool (0: the default)

	// Through a workload manager's launcher (launcher != ""): mpirun, mpiexec.hydra or srun.
	launcher     string
	launcherArgs []string
	protocol     string             // launch.Request.Protocol
	userEnv      map[string]*string // launch.json's env alone, for the launcher
}

// decodeArgs unmarshals launch or attach arguments, naming a field with a wrong type.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("missing arguments")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return errors.New(jsonError(err))
	}
	return nil
}

// planLaunch validates launch arguments against the README contract.
func planLaunch(raw json.RawMessage) (*launchPlan, error) {
	var a LaunchArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Program == "" {
		return nil, errors.New(`"program" is required`)
	}
	prog, err := filepath.Abs(a.Program)
	if err != nil {
		return nil, fmt.Errorf("program %q: %v", a.Program, err)
	}
	st, err := os.Stat(prog)
	switch {
	case err != nil:
		return nil, fmt.Errorf("program %s: %v", prog, errors.Unwrap(err))
	case st.IsDir():
		return nil, fmt.Errorf("program %s is a directory", prog)
	case a.CoreFile == "" && st.Mode()&0o111 == 0:
		return nil, fmt.Errorf("program %s is not executable", prog)
	}
	p := &launchPlan{program: prog, args: a.Args, stopAtEntry: a.StopAtEntry, coreFile: a.CoreFile, noDebug: a.NoDebug,
		sessionName: a.SessionName}
	if a.SessionName != "" {
		if err := checkSessionName("sessionName", a.SessionName); err != nil {
			return nil, err
		}
	}
	local := a.Launcher == "" || a.Launcher == "local"
	if !local {
		if err := launch.CheckLauncher(a.Launcher); err != nil {
			return nil, err
		}
		p.launcher, p.launcherArgs, p.userEnv = a.Launcher, a.LauncherArgs, a.Env
		if _, err := launch.ParseProtocol(a.LaunchProtocol); err != nil {
			return nil, err
		}
		p.protocol = a.LaunchProtocol
	} else if a.LaunchProtocol != "" {
		return nil, errors.New(`"launchProtocol" has no meaning for the local launcher`)
	}
	p.np = 1
	if !local {
		p.np = 0 // the launcher's default, or what launcherArgs say
	}
	if a.Np != nil {
		if *a.Np < 1 {
			return nil, fmt.Errorf(`"np" must be at least 1, not %d`, *a.Np)
		}
		if local && *a.Np > maxLocalRanks {
			return nil, fmt.Errorf(`"np" %d exceeds the local launcher's limit of %d ranks`, *a.Np, maxLocalRanks)
		}
		p.np = *a.Np
	}
	if len(a.LauncherArgs) > 0 && local {
		return nil, errors.New(`"launcherArgs" has no meaning for the local launcher`)
	}
	switch a.Emulator {
	case "":
	case "qemu-ppc64", "qemu-ppc64le":
		if err := checkEmulator(a.Emulator, prog, local, a.CoreFile); err != nil {
			return nil, err
		}
		p.emulator = a.Emulator
	default:
		return nil, fmt.Errorf(`emulator %q: want "qemu-ppc64" or "qemu-ppc64le"`, a.Emulator)
	}
	if p.mode, err = parseStopMode(a.StopMode); err != nil {
		return nil, err
	}
	p.focus = a.Ranks
	if p.np > 0 { // otherwise the job's size is known once it runs
		if _, err := debugger.ParseFocus(a.Ranks, p.np); err != nil {
			return nil, err
		}
	}
	if a.CoreFile != "" {
		cf, err := filepath.Abs(a.CoreFile)
		if err == nil {
			_, err = os.Stat(cf)
		}
		if err != nil {
			return nil, fmt.Errorf("coreFile %s: %v", a.CoreFile, err)
		}
		p.coreFile = cf
	}
	p.cwd = a.Cwd
	if p.cwd == "" {
		p.cwd = filepath.Dir(prog)
	}
	if st, err := os.Stat(p.cwd); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("cwd %s is not a directory", p.cwd)
	}
	p.env = mergeEnv(os.Environ(), a.Env)
	p.noASLR = a.DisableASLR == nil || *a.DisableASLR
	if p.paths, err = parseSubstitutePath(a.SubstitutePath); err != nil {
		return nil, err
	}
	if p.callTimeout, err = parseCallTimeout(a.CallTimeout); err != nil {
		return nil, err
	}
	if p.fanout, err = parseFanout(a.Fanout); err != nil {
		return nil, err
	}
	if p.perAgent, err = parseRanksPerAgent(a.RanksPerAgent); err != nil {
		return nil, err
	}
	if p.priority, err = parseToolPriority(a.ToolPriority); err != nil {
		return nil, err
	}
	return p, nil
}

// parseToolPriority checks the toolPriority argument; nil gives 0, the default. A CDTI
// priority is 1 to 99 (MaxUpdatePriorityLevel); 0 would be a query-only tool, which cannot
// debug.
func parseToolPriority(n *int) (uint8, error) {
	if n == nil {
		return 0, nil
	}
	if *n < 1 || *n > maxToolPriority {
		return 0, fmt.Errorf(`"toolPriority" must be between 1 and %d, not %d`, maxToolPriority, *n)
	}
	return uint8(*n), nil
}

// maxToolPriority is the highest CDTI priority a tool may attach with.
const maxToolPriority = cdti.MaxUpdatePriorityLevel

// parseRanksPerAgent checks the ranksPerAgent argument; nil gives 0, the most (64).
func parseRanksPerAgent(n *int) (int, error) {
	if n == nil {
		return 0, nil
	}
	if *n < 1 || *n > launch.RanksPerAgent {
		return 0, fmt.Errorf(`"ranksPerAgent" must be between 1 and %d, not %d`, launch.RanksPerAgent, *n)
	}
	return *n, nil
}

// maxLocalRanks bounds np for the local launcher: 64 agents (launch.LocalSpawn starts one per
// launch.RanksPerAgent ranks).
const maxLocalRanks = 64 * launch.RanksPerAgent

// mergeEnv applies launch.json's env to an environment: a value sets, null removes.
func mergeEnv(base []string, env map[string]*string) []string {
	out := make([]string, 0, len(base)+len(env))
	for _, kv := range base {
		name := kv
		if i := indexByte(kv, '='); i >= 0 {
			name = kv[:i]
		}
		if _, overridden := env[name]; overridden || name == "HPCDAP_TOKEN" {
			continue
		}
		out = append(out, kv)
	}
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if v := env[k]; v != nil {
			out = append(out, k+"="+*v)
		}
	}
	return out
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// attachPlan is a validated attach request.
type attachPlan struct {
	pids        map[int]int // rank → pid
	launcherPid int         // a running mpirun, mpiexec.hydra or srun of this host
	slurmJob    string      // a Slurm job step "J.S"
	nspace      string      // with launcherPid: the PMIx namespace of its job
	waitName    string      // wait for a process that runs this program to start
	waitTimeout time.Duration
	program     string
	mode        debugger.StopMode
	focus       string
	stopAtEntry bool
	paths       pathMap
	sessionName string // shared under this name
	fanout      int    // the agents' tree (0: the default)
	perAgent    int    // ranks per node agent (0: launch.RanksPerAgent)
	priority    uint8  // the CDTI priority of the session's tool (0: the default)
}

// planAttach validates attach arguments: exactly one of pid, pids, launcherPid, slurmJob,
// pmixNamespace and processName.
func planAttach(raw json.RawMessage) (*attachPlan, error) {
	var a AttachArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	given := 0
	for _, set := range []bool{a.Pid != nil, a.Pids != nil, a.LauncherPid != nil, a.SlurmJob != "", a.PMIxNamespace != "", a.ProcessName != ""} {
		if set {
			given++
		}
	}
	if given != 1 {
		return nil, errors.New(`give exactly one of "pid", "pids", "launcherPid", "slurmJob", "pmixNamespace" and "processName"`)
	}
	if a.WaitFor && a.ProcessName == "" {
		return nil, errors.New(`"waitFor" waits for a process by "processName": give one`)
	}
	if a.Timeout != nil && !a.WaitFor {
		return nil, errors.New(`"timeout" bounds "waitFor": give both or neither`)
	}
	p := &attachPlan{pids: map[int]int{}, stopAtEntry: a.StopAtEntry, sessionName: a.SessionName}
	var err error
	if a.SessionName != "" {
		if err := checkSessionName("sessionName", a.SessionName); err != nil {
			return nil, err
		}
	}
	if p.mode, err = parseStopMode(a.StopMode); err != nil {
		return nil, err
	}
	if p.fanout, err = parseFanout(a.Fanout); err != nil {
		return nil, err
	}
	if p.perAgent, err = parseRanksPerAgent(a.RanksPerAgent); err != nil {
		return nil, err
	}
	if p.priority, err = parseToolPriority(a.ToolPriority); err != nil {
		return nil, err
	}
	if p.perAgent != 0 && a.LauncherPid == nil && a.PMIxNamespace == "" && a.SlurmJob == "" {
		return nil, errors.New(`"ranksPerAgent" applies to an attach through a launcher ("launcherPid", "pmixNamespace") or a Slurm step ("slurmJob")`)
	}
	switch {
	case a.LauncherPid != nil:
		if *a.LauncherPid <= 0 {
			return nil, fmt.Errorf(`"launcherPid" %d is not a process id`, *a.LauncherPid)
		}
		if !launch.ProcessExists(*a.LauncherPid) {
			return nil, fmt.Errorf("launcherPid %d: no such process on this host", *a.LauncherPid)
		}
		p.launcherPid = *a.LauncherPid
	case a.PMIxNamespace != "":
		pid, err := launch.PMIxServerOf(a.PMIxNamespace)
		if err != nil {
			return nil, err
		}
		p.launcherPid, p.nspace = pid, a.PMIxNamespace
	case a.SlurmJob != "":
		if !launch.IsSlurmStep(a.SlurmJob) {
			return nil, fmt.Errorf(`slurmJob %q: want a job step "JOBID.STEPID" such as "1234.0" (squeue --steps lists them)`, a.SlurmJob)
		}
		p.slurmJob = a.SlurmJob
	case a.ProcessName != "" && a.WaitFor:
		p.waitName, p.waitTimeout = a.ProcessName, defaultWaitFor
		if a.Timeout != nil {
			if *a.Timeout <= 0 || *a.Timeout > maxWaitFor.Seconds() {
				return nil, fmt.Errorf(`"timeout" %g: want seconds in (0, %g]`, *a.Timeout, maxWaitFor.Seconds())
			}
			p.waitTimeout = time.Duration(*a.Timeout * float64(time.Second))
		}
	case a.ProcessName != "":
		m, err := launch.ProcessNamed(a.ProcessName)
		if err != nil {
			return nil, fmt.Errorf("processName: %w", err)
		}
		p.pids[0] = m.Pid
	case a.Pid != nil:
		if *a.Pid <= 0 {
			return nil, fmt.Errorf(`"pid" %d is not a process id`, *a.Pid)
		}
		p.pids[0] = *a.Pid
	default:
		if len(a.Pids) == 0 {
			return nil, errors.New(`"pids" names no process`)
		}
		seen := map[int]int{}
		for k, pid := range a.Pids {
			r, err := strconv.Atoi(k)
			if err != nil || r < 0 {
				return nil, fmt.Errorf(`"pids": key %q is not a rank`, k)
			}
			if pid <= 0 {
				return nil, fmt.Errorf(`"pids": rank %d: %d is not a process id`, r, pid)
			}
			if o, dup := seen[pid]; dup {
				return nil, fmt.Errorf(`"pids": pid %d given for ranks %d and %d`, pid, o, r)
			}
			seen[pid] = r
			p.pids[r] = pid
		}
	}
	for r, pid := range p.pids {
		if !launch.ProcessExists(pid) {
			return nil, fmt.Errorf("rank %d: pid %d: no such process", r, pid)
		}
	}
	if a.Program != "" {
		if p.program, err = filepath.Abs(a.Program); err != nil {
			return nil, err
		}
	}
	p.focus = a.Ranks
	if p.paths, err = parseSubstitutePath(a.SubstitutePath); err != nil {
		return nil, err
	}
	return p, nil
}

// defaultWaitFor and maxWaitFor are the default and the bound of an attach's waitFor timeout.
const (
	defaultWaitFor = 30 * time.Second
	maxWaitFor     = time.Hour
)

// maxCallTimeout bounds the callTimeout argument.
const maxCallTimeout = time.Hour

// parseCallTimeout checks the callTimeout argument (seconds); nil gives callTimeout.
func parseCallTimeout(secs *float64) (time.Duration, error) {
	if secs == nil {
		return debugger.CallTimeout, nil
	}
	d := time.Duration(*secs * float64(time.Second))
	if !(*secs > 0) || d < time.Millisecond || d > maxCallTimeout {
		return 0, fmt.Errorf(`"callTimeout" must be between 0.001 and %v seconds, not %v`, maxCallTimeout.Seconds(), *secs)
	}
	return d, nil
}
