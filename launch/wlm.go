package launch

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"

	"github.com/hpcdap/hpcdap/cdti"
)

// Proc is one rank of a job: where it runs.
type Proc struct {
	Rank       int
	Host       string // the workload manager's name for the node
	Pid        int    // process id on that node
	Executable string // as the launcher recorded it (often relative); the node's /proc/PID/exe is the truth
}

// Hold says how the ranks of a job launched with a barrier wait for Release.
type Hold int

const (
	// HoldNone: nothing holds the ranks (MPICH hydra attached by its launcher's pid): while the
	// launcher is stopped they block in their first PMI exchange inside MPI_Init, by accident;
	// once it runs they go on.
	HoldNone Hold = iota
	// HoldInInit: the ranks wait inside MPI_Init until the launcher is released (Open MPI).
	HoldInInit
	// HoldAtExec: the ranks are in a job-control stop (SIGSTOP) at their first instruction,
	// untraced (Slurm). A tool that attaches must send them SIGCONT when it continues them:
	// the workload manager resumes only the ranks nobody traces.
	HoldAtExec
	// HoldByAgent: the ranks are held right after their exec, before their first
	// instruction, by the node agent that caught them following the launcher's forks (MPICH
	// hydra). A tool starts a rank by taking control of it (CDTI Control); a rank whose last
	// tool leaves without doing so starts then.
	HoldByAgent
)

// String names the hold for messages.
func (h Hold) String() string {
	switch h {
	case HoldNone:
		return "none"
	case HoldInInit:
		return "in MPI_Init"
	case HoldAtExec:
		return "at exec"
	case HoldByAgent:
		return "at exec, by the node agent"
	}
	return fmt.Sprintf("Hold(%d)", int(h))
}

// LaunchSpec describes a job to start.
type LaunchSpec struct {
	// Launcher is "mpirun" (Open MPI's, or whatever mpirun resolves to), "mpiexec.hydra",
	// "srun", or a path to one of them.
	Launcher    string
	Args        []string // launcher arguments before the program (-np 4, -N2 -n8 --mpi=pmix, ...)
	Program     string
	ProgramArgs []string
	Env         []string // variables added to this process's environment for the launcher ("K=V")
	Unset       []string // variables removed from it
	// NoASLR starts the launcher without address-space randomisation, which its descendants
	// inherit: the ranks of mpirun and mpiexec.hydra on this host (not srun's, which Slurm
	// starts).
	NoASLR bool
	Dir    string // working directory ("" for this process's)
	// Output receives the launcher's standard output and error, which carry the ranks' output
	// under mpirun and srun ("" : a file in the front end's working directory, OutputPath).
	Output string
	// Protocol is how the ranks are reached ("": chosen from what the launcher offers).
	Protocol Protocol
	// Subset names the ranks the tool controls, in the MPIR subset notation, for a launcher
	// that takes one (BG/Q's runjob: MPIR_subset_attach); "" is every rank.
	Subset string
}

// JobRef names a running job for Frontend.Attach: exactly one field is set.
type JobRef struct {
	LauncherPid int    // a running mpirun, mpiexec.hydra or srun on this host
	SlurmJob    string // a Slurm job step "J.S"
	// Nspace, with LauncherPid, names the job of a PMIx launcher to attach to ("": its one
	// application job).
	Nspace string
}

// NodeResult is the outcome of a command run on one node.
type NodeResult struct {
	Host   string
	Output string
	Err    error
}

// WLM is one workload manager: how jobs start and are found, and how commands, files and tool
// daemons reach the job's nodes.
type WLM interface {
	// Name is the name HPCDAP_WLM selects it by.
	Name() string
	// Available reports why the WLM cannot be used on this machine, or nil.
	Available() error
	// Launch starts a job. With barrier the ranks are held (see Job.Hold) until Job.Release;
	// without, they are released before Launch returns.
	Launch(ctx context.Context, fe *Frontend, spec LaunchSpec, barrier bool) (Job, error)
	// Attach registers a running job.
	Attach(ctx context.Context, fe *Frontend, ref JobRef) (Job, error)
}

// Job is a job under a WLM.
type Job interface {
	// ID names the job ("slurm 42.0", "mpirun pid 4242").
	ID() string
	// Procs is the rank table, ordered by rank.
	Procs() []Proc
	// Hosts lists the nodes the job's daemons and files go to: the job's nodes.
	Hosts() []string
	// Hold says how held ranks wait (meaningful until Release).
	Hold() Hold
	// Release lets held ranks go; releasing twice is a no-op.
	Release(ctx context.Context) error
	// Kill sends sig to every rank and ends the launcher.
	Kill(ctx context.Context, sig syscall.Signal) error
	// Wait waits for the launcher to end and returns its wait status (jobs found by a Slurm
	// step id have no launcher: Wait returns when the step is gone, with status 0).
	Wait(ctx context.Context) (cdti.ExitStatus, error)
	// Stage creates dir (mode 0700, with bin/, lib/ and tmp/) on every host of Hosts. The
	// workload manager removes it when the job ends even if the front end is gone; Staging's
	// Remove removes it now.
	Stage(ctx context.Context, dir string) (Staging, error)
	// Exec runs argv once on each host, synchronously, and reports per host.
	Exec(ctx context.Context, hosts []string, argv []string) []NodeResult
	// Ship copies the local file src to dst on each of hosts (nil: every host of Hosts, in one
	// broadcast).
	Ship(ctx context.Context, hosts []string, src, dst string) error
	// Start starts one daemon per host, argv(host) on host with the extra environment env.
	Start(ctx context.Context, hosts []string, argv func(host string) []string, env []string) (*DaemonSet, error)
	// Close lets the job go: the launcher's agent detaches (a launcher still stopped is
	// released first). It does not kill the job.
	Close() error
}

// Staging is a staging directory on a job's nodes.
type Staging interface {
	// Remove deletes the directory on every node (nothing to do once the job has ended: the
	// workload manager removed it then).
	Remove(ctx context.Context) error
	// Stores groups the hosts by the directory they see: the hosts of one group share one
	// directory (a shared file system), so a file written there by the group's first host
	// reaches them all. Node-local directories make one group per host.
	Stores() [][]string
}

var (
	wlmMu sync.Mutex
	wlms  = map[string]func() WLM{}
)

// RegisterWLM makes a workload manager selectable by name.
func RegisterWLM(name string, make func() WLM) {
	wlmMu.Lock()
	defer wlmMu.Unlock()
	wlms[name] = make
}

// WLMs lists the registered workload managers.
func WLMs() []string {
	wlmMu.Lock()
	defer wlmMu.Unlock()
	var out []string
	for n := range wlms {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LookupWLM returns the workload manager registered as name.
func LookupWLM(name string) (WLM, error) {
	wlmMu.Lock()
	make, ok := wlms[name]
	wlmMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("launch: workload manager %q: unknown (known: %v)", name, WLMs())
	}
	return make(), nil
}

// DetectWLM chooses the workload manager: HPCDAP_WLM if set, else Slurm when srun works here,
// else the local launchers.
func DetectWLM() (WLM, error) {
	if name := os.Getenv("HPCDAP_WLM"); name != "" {
		w, err := LookupWLM(name)
		if err != nil {
			return nil, fmt.Errorf("launch: HPCDAP_WLM: %w", err)
		}
		return w, nil
	}
	for _, name := range []string{"slurm", "local"} {
		if w, err := LookupWLM(name); err == nil && w.Available() == nil {
			return w, nil
		}
	}
	return nil, fmt.Errorf("launch: no workload manager available (known: %v)", WLMs())
}
