package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Request is what a debug session asks of the job layer: launch a program through a launcher,
// or attach to a running job. It mirrors the DAP launch and attach arguments.
type Request struct {
	// Launch: Launcher is "mpirun", "mpiexec.hydra" or "srun" (or a path to one of them).
	Launcher     string
	LauncherArgs []string // extra launcher arguments, before the program
	NP           int      // number of ranks (0: leave it to LauncherArgs)
	Program      string
	Args         []string
	Env          []string // "K=V" added to the launcher's environment (and so the ranks')
	Unset        []string // variables removed from it
	NoASLR       bool     // see LaunchSpec.NoASLR
	Dir          string
	Output       string // file for the launcher's output ("" : one in the front end's directory)
	// LabelOutput asks the launcher to label each line of its ranks' output with the rank
	// (FollowOutput reads the labels).
	LabelOutput bool
	// Protocol names how the ranks are reached: "mpir", "pmix", "follow" ("": chosen from
	// what the launcher offers; see ParseProtocol).
	Protocol string
	// Subset names the ranks to debug, in the MPIR subset notation, for a launcher that
	// starts the tool for a subset (BG/Q's runjob: MPIR_subset_attach); "" is every rank.
	Subset string

	// Attach: exactly one, instead of a program.
	LauncherPid int    // a running mpirun, mpiexec.hydra or srun on this host
	SlurmJob    string // a Slurm job step "J.S"
	// PMIxNamespace names the job of a running PMIx launcher of this host (PMIxServerOf
	// finds it); with LauncherPid, that launcher's job of this namespace.
	PMIxNamespace string
}

// WLMFor names the workload manager a request needs: "slurm" for srun or a Slurm step, "bgq"
// for runjob, else HPCDAP_WLM if set, else "local".
func WLMFor(req Request) string {
	if req.SlurmJob != "" || filepath.Base(req.Launcher) == "srun" {
		return "slurm"
	}
	if launcherNames[filepath.Base(req.Launcher)] == "bgq" {
		return "bgq"
	}
	if req.LauncherPid != 0 {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(req.LauncherPid) + "/exe"); err == nil && filepath.Base(exe) == "srun" {
			return "slurm"
		} else if err == nil && launcherNames[filepath.Base(exe)] == "bgq" {
			return "bgq"
		}
	}
	if w := os.Getenv("HPCDAP_WLM"); w != "" {
		return w
	}
	return "local"
}

// npArgs are the launcher arguments that ask for np ranks.
func npArgs(launcher string, np int) ([]string, error) {
	if np <= 0 {
		return nil, nil
	}
	family := familyOf(filepath.Base(launcher))
	if family == "" {
		var err error
		if _, family, err = launcherPath(launcher); err != nil {
			return nil, err
		}
	}
	switch family {
	case "openmpi", "prrte":
		return []string{"-np", strconv.Itoa(np)}, nil
	case "hydra", "srun":
		return []string{"-n", strconv.Itoa(np)}, nil
	case "bgq":
		return []string{"--np", strconv.Itoa(np)}, nil
	}
	return nil, fmt.Errorf("launch: launcher %s: unknown family, cannot ask for %d ranks", launcher, np)
}

// Start carries out a request on fe: it launches the job with its ranks held (or attaches to
// it) and starts one node agent per node of the job. The ranks stay held until App.Release,
// which the caller sends once it has attached to every rank through the agents (for
// HoldAtExec ranks, a traced rank also needs SIGCONT from the tool). On error nothing is left
// behind but what the returned App (if not nil) still owns: Deregister it.
func Start(ctx context.Context, fe *Frontend, req Request) (*App, *Agents, error) {
	var app *App
	var err error
	switch {
	case req.LauncherPid != 0 || req.SlurmJob != "" || req.PMIxNamespace != "":
		if req.LauncherPid != 0 && req.SlurmJob != "" || req.PMIxNamespace != "" && req.SlurmJob != "" {
			return nil, nil, errors.New("launch: give one of a launcher pid, a PMIx namespace and a Slurm job step")
		}
		pid := req.LauncherPid
		if pid == 0 && req.PMIxNamespace != "" {
			if pid, err = PMIxServerOf(req.PMIxNamespace); err != nil {
				return nil, nil, err
			}
		}
		app, err = fe.Attach(ctx, JobRef{LauncherPid: pid, SlurmJob: req.SlurmJob, Nspace: req.PMIxNamespace})
	default:
		if req.Launcher == "" {
			return nil, nil, errors.New("launch: no launcher")
		}
		proto, perr := ParseProtocol(req.Protocol)
		if perr != nil {
			return nil, nil, fmt.Errorf("launch: %w", perr)
		}
		np, nerr := npArgs(req.Launcher, req.NP)
		if nerr != nil {
			return nil, nil, nerr
		}
		var args []string
		if req.LabelOutput {
			args = labelArgs(req.Launcher)
		}
		args = append(append(args, req.LauncherArgs...), np...)
		app, err = fe.LaunchBarrier(ctx, LaunchSpec{Launcher: req.Launcher, Args: args,
			Program: req.Program, ProgramArgs: req.Args, Env: req.Env, Unset: req.Unset, NoASLR: req.NoASLR, Dir: req.Dir, Output: req.Output,
			Protocol: proto, Subset: req.Subset})
	}
	if err != nil {
		return nil, nil, err
	}
	g, err := app.StartAgents(ctx)
	if err != nil {
		return app, g, err
	}
	return app, g, nil
}

// Open makes a front end with opts for the workload manager req needs (WLMFor, unless
// opts.WLM says) and carries req out on it (Start). On error nothing is left behind: a job it
// launched is ended, a job it attached to is left running, and the front end is closed.
func Open(ctx context.Context, opts Options, req Request) (*Frontend, *App, *Agents, error) {
	if opts.WLM == "" {
		opts.WLM = WLMFor(req)
	}
	fe, err := NewFrontend(opts)
	if err != nil {
		return nil, nil, nil, err
	}
	app, g, err := Start(ctx, fe, req)
	if err != nil {
		if app != nil {
			if derr := app.Deregister(); derr != nil {
				err = fmt.Errorf("%w; clean-up: %v", err, derr)
			}
		}
		fe.Close()
		return nil, nil, nil, err
	}
	return fe, app, g, nil
}
