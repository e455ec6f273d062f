package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"
)

// Options configure a Frontend. Zero values take the defaults.
type Options struct {
	// WLM names the workload manager ("slurm", "local"); "" means DetectWLM.
	WLM string
	// AgentPath is the hpcdap executable shipped to nodes and run as `hpcdap agent`
	// (default: this executable).
	AgentPath string
	// NodeTmpDir is the directory on every node under which sessions make their staging
	// directories (default: $HPCDAP_NODE_TMPDIR, else /tmp).
	NodeTmpDir string
	// AdvertiseHost is the address node agents use to reach the front end's rendezvous
	// listener (default: $HPCDAP_FRONTEND_HOST, else 127.0.0.1 for the local WLM and, for the
	// others, the source address of this host's route to the job's nodes: loopback only when
	// every node is this host).
	AdvertiseHost string
	// WorkDir holds the front end's logs and temporary files (default: a new directory under
	// the system temporary directory, removed by Close).
	WorkDir string
	// Timeout bounds each phase of a launch or attach (launcher to MPIR_Breakpoint, agents
	// registering, shipping); default 60 s.
	Timeout time.Duration
	// Logger receives progress and diagnostics (default: discarded).
	Logger *log.Logger
	// Progress, when set, receives one line as each phase of a launch or attach begins or
	// ends (the launcher started, the rank table read, the staging directory made, files
	// shipped, each node agent registered), for a user waiting on it.
	Progress func(msg string)
	// RanksPerAgent is how many ranks each agent of a node serves (0: the most, 64): a node
	// of more ranks has an agent per group of them, so that a job of few nodes can have as
	// many agents, and as deep a tree of them, as one of many.
	RanksPerAgent int
}

// Frontend is the front end of the tool: it owns the workload manager and every App it made,
// and cleans them up on Close.
type Frontend struct {
	wlm     WLM
	opts    Options
	logger  *log.Logger
	ownsDir bool

	mu     sync.Mutex
	apps   map[*App]bool
	closed bool
}

// NewFrontend chooses the workload manager and prepares the working directory.
func NewFrontend(opts Options) (*Frontend, error) {
	var w WLM
	var err error
	if opts.WLM != "" {
		w, err = LookupWLM(opts.WLM)
	} else {
		w, err = DetectWLM()
	}
	if err != nil {
		return nil, err
	}
	if err := w.Available(); err != nil {
		return nil, fmt.Errorf("launch: workload manager %s: %w", w.Name(), err)
	}
	if opts.RanksPerAgent < 0 || opts.RanksPerAgent > RanksPerAgent {
		return nil, fmt.Errorf("launch: %d ranks per agent: between 1 and %d (0: %d)", opts.RanksPerAgent, RanksPerAgent, RanksPerAgent)
	}
	if opts.AgentPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("launch: find the hpcdap executable for the agents: %w", err)
		}
		opts.AgentPath = exe
	}
	if opts.NodeTmpDir == "" {
		opts.NodeTmpDir = os.Getenv("HPCDAP_NODE_TMPDIR")
	}
	if opts.NodeTmpDir == "" {
		opts.NodeTmpDir = "/tmp"
	}
	if opts.AdvertiseHost == "" {
		opts.AdvertiseHost = os.Getenv("HPCDAP_FRONTEND_HOST")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	fe := &Frontend{wlm: w, opts: opts, logger: opts.Logger, apps: map[*App]bool{}}
	if fe.logger == nil {
		fe.logger = log.New(io.Discard, "", 0)
	}
	if fe.opts.WorkDir == "" {
		d, err := os.MkdirTemp("", "hpcdap-fe-")
		if err != nil {
			return nil, fmt.Errorf("launch: front end directory: %w", err)
		}
		fe.opts.WorkDir, fe.ownsDir = d, true
	} else if err := os.MkdirAll(fe.opts.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("launch: front end directory: %w", err)
	}
	return fe, nil
}

// WLM is the workload manager in use.
func (fe *Frontend) WLM() WLM { return fe.wlm }

// Options returns the effective options.
func (fe *Frontend) Options() Options { return fe.opts }

func (fe *Frontend) logf(format string, args ...any) { fe.logger.Printf(format, args...) }

// progressf reports a phase's progress to Options.Progress and the log.
func (fe *Frontend) progressf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fe.logger.Print(msg)
	if fe.opts.Progress != nil {
		fe.opts.Progress(msg)
	}
}

// workFile returns a new file name in the working directory.
func (fe *Frontend) workFile(pattern string) (string, error) {
	f, err := os.CreateTemp(fe.opts.WorkDir, pattern)
	if err != nil {
		return "", err
	}
	name := f.Name()
	f.Close()
	return name, nil
}

// Launch starts a job and releases it at once.
func (fe *Frontend) Launch(ctx context.Context, spec LaunchSpec) (*App, error) {
	return fe.launch(ctx, spec, false)
}

// LaunchBarrier starts a job with its ranks held (see Hold) until App.Release.
func (fe *Frontend) LaunchBarrier(ctx context.Context, spec LaunchSpec) (*App, error) {
	return fe.launch(ctx, spec, true)
}

func (fe *Frontend) launch(ctx context.Context, spec LaunchSpec, barrier bool) (*App, error) {
	if err := fe.usable(); err != nil {
		return nil, err
	}
	if spec.Program == "" {
		return nil, errors.New("launch: no program")
	}
	if spec.Output == "" {
		out, err := fe.workFile("output-*.log")
		if err != nil {
			return nil, fmt.Errorf("launch: output file: %w", err)
		}
		spec.Output = out
	}
	job, err := fe.wlm.Launch(ctx, fe, spec, barrier)
	if err != nil {
		return nil, err
	}
	return fe.add(job, true, spec.Output), nil
}

// Attach registers a running job (Register in CTI's terms).
func (fe *Frontend) Attach(ctx context.Context, ref JobRef) (*App, error) {
	if err := fe.usable(); err != nil {
		return nil, err
	}
	if (ref.LauncherPid != 0) == (ref.SlurmJob != "") {
		return nil, errors.New("launch: attach: give exactly one of a launcher pid and a Slurm job step")
	}
	job, err := fe.wlm.Attach(ctx, fe, ref)
	if err != nil {
		return nil, err
	}
	return fe.add(job, false, ""), nil
}

func (fe *Frontend) usable() error {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	if fe.closed {
		return errors.New("launch: front end closed")
	}
	return nil
}

func (fe *Frontend) add(job Job, launched bool, output string) *App {
	a := &App{fe: fe, job: job, launched: launched, output: output}
	fe.mu.Lock()
	fe.apps[a] = true
	fe.mu.Unlock()
	return a
}

func (fe *Frontend) remove(a *App) {
	fe.mu.Lock()
	delete(fe.apps, a)
	fe.mu.Unlock()
}

// Close deregisters every App (ending the jobs this front end launched and did not let go,
// removing every session's files from the nodes) and removes the working directory.
func (fe *Frontend) Close() error {
	fe.mu.Lock()
	fe.closed = true
	apps := make([]*App, 0, len(fe.apps))
	for a := range fe.apps {
		apps = append(apps, a)
	}
	fe.mu.Unlock()
	var errs []error
	for _, a := range apps {
		if err := a.Deregister(); err != nil {
			errs = append(errs, err)
		}
	}
	if fe.ownsDir {
		os.RemoveAll(fe.opts.WorkDir)
	}
	return errors.Join(errs...)
}
