package adapter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/hpcdap/hpcdap/launch"
)

// Launchers of a workload manager (package launch): mpirun, mpiexec.hydra and srun are
// driven under MPIR by an agent attached to the launcher, a running job is found through its
// launcher's proctable or its Slurm step, and launch starts one agent per node in attach
// mode. The adapter then takes control of every rank through those agents (Job.start),
// lets the launcher go (release) and ends what it started as terminateDebuggee says (end).

// mpiLaunchers are the launcher names the launch argument accepts, by family.
var mpiLaunchers = map[string]string{
	"mpirun": "", "mpiexec": "", "orterun": "openmpi", "mpirun.openmpi": "openmpi", "mpiexec.openmpi": "openmpi",
	"mpiexec.hydra": "hydra", "mpirun.mpich": "hydra", "mpiexec.mpich": "hydra", "srun": "srun",
}

// checkMPILauncher validates the launch argument "launcher" when it is not the local one: a
// known launcher name (or a path to one) that can be found.
func checkMPILauncher(name string) error {
	if _, ok := mpiLaunchers[filepath.Base(name)]; !ok {
		return fmt.Errorf(`launcher %q: want "local", "mpirun", "mpiexec.hydra" or "srun" (or mpirun.openmpi, mpiexec.mpich, a path to one of them)`, name)
	}
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("launcher %q: not found (%v): install Open MPI, MPICH or Slurm, or give its path", name, errors.Unwrap(err))
	}
	return nil
}

// launcherFamily says which launcher a name resolves to: "openmpi", "hydra", "srun" or "".
func launcherFamily(name string) string {
	if f := mpiLaunchers[filepath.Base(name)]; f != "" {
		return f
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	switch base := filepath.Base(p); {
	case base == "orterun" || base == "mpirun.openmpi" || base == "prterun":
		return "openmpi"
	case strings.HasPrefix(base, "mpiexec.hydra") || base == "hydra":
		return "hydra"
	case base == "srun":
		return "srun"
	}
	return ""
}

// labelArgs ask a launcher to label each line of its ranks' output with the rank.
func labelArgs(family string) []string {
	switch family {
	case "openmpi":
		return []string{"--tag-output"}
	case "hydra":
		return []string{"-prepend-rank"}
	case "srun":
		return []string{"--label"}
	}
	return nil
}

// wlmLauncher is a Launcher through package launch. After the job's ranks are under the
// adapter's control, release lets the launcher go; end finishes with the job.
type wlmLauncher struct {
	req      launch.Request
	agentExe string
	logDir   string
	logger   *log.Logger
	timeout  time.Duration // per phase
	// phase, when set, receives a line as each phase of the launch begins or ends.
	phase func(msg string)

	fe     *launch.Frontend
	app    *launch.App
	agents *launch.Agents

	cancel  context.CancelFunc // stops the output and launcher watchers
	watched sync.WaitGroup
	endOnce sync.Once
}

// launchRequest turns a launch plan with an MPI launcher into the job layer's request.
func launchRequest(p *launchPlan) launch.Request {
	var env, unset []string
	for k, v := range p.userEnv {
		if v != nil {
			env = append(env, k+"="+*v)
		} else {
			unset = append(unset, k)
		}
	}
	sort.Strings(env)
	sort.Strings(unset)
	args := append(labelArgs(launcherFamily(p.launcher)), p.launcherArgs...)
	return launch.Request{Launcher: p.launcher, LauncherArgs: args, NP: p.np, Program: p.program, Args: p.args,
		Env: env, Unset: unset, NoASLR: p.noASLR, Dir: p.cwd}
}

func (l *wlmLauncher) Start(ctx context.Context, progress func(done, total int)) (*Placement, error) {
	work, err := os.MkdirTemp(l.logDir, "launch-*")
	if err != nil {
		return nil, fmt.Errorf("launch: working directory: %w", err)
	}
	fe, err := launch.NewFrontend(launch.Options{WLM: launch.WLMFor(l.req), AgentPath: l.agentExe, WorkDir: work,
		Timeout: l.timeout, Logger: l.logger, Progress: l.phase})
	if err != nil {
		return nil, err
	}
	app, g, err := launch.Start(ctx, fe, l.req)
	if err != nil {
		if app != nil {
			// A launched job goes with the failure; an attached one is left running.
			if derr := app.Deregister(); derr != nil {
				err = fmt.Errorf("%w; clean-up: %v", err, derr)
			}
		}
		fe.Close()
		return nil, err
	}
	l.fe, l.app, l.agents = fe, app, g
	if progress != nil {
		progress(1, 1)
	}
	pl := &Placement{Size: app.Placement().Size}
	for _, ep := range g.Endpoints {
		pl.Nodes = append(pl.Nodes, &NodeEndpoint{Addr: ep.Addr, Token: ep.Token, Host: ep.Host,
			Ranks: append([]int(nil), ep.Ranks...), Owned: ep.Owned})
	}
	return pl, nil
}

// hold says how the ranks wait for release.
func (l *wlmLauncher) hold() launch.Hold { return l.app.Hold() }

// release lets the launcher go once every rank is under the adapter's control (stopped by
// Job.start), so that the launcher never stays stopped while ranks run: Open MPI's ranks
// leave MPI_Init when continued, srun's (held at exec in a job-control stop) also need a
// SIGCONT from their tracer. It then forwards the launcher's output and reports its end.
func (l *wlmLauncher) release(ctx context.Context, j *Job) error {
	hold := l.app.Hold()
	if err := l.app.Release(ctx); err != nil {
		return err
	}
	if hold == launch.HoldAtExec {
		var errs []error
		for _, r := range j.ranks {
			if _, err := r.node.client.Update(ctx, uint32(r.Num), &cdti.SendSignalToProcess{Signal: uint32(syscall.SIGCONT)}); err != nil {
				errs = append(errs, fmt.Errorf("rank %d on %s: SIGCONT: %w", r.Num, r.node.host, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	stop := make(chan struct{})
	if path := l.app.OutputPath(); path != "" {
		l.watched.Go(func() { forwardLauncherOutput(wctx, path, stop, j.s.sendOutput) })
	}
	name := filepath.Base(l.req.Launcher)
	if name == "." {
		name = "the launcher"
	}
	l.watched.Go(func() {
		st, err := l.app.Wait(wctx)
		// Whatever the launcher wrote before it ended goes out before its end is reported.
		close(stop)
		if err != nil {
			return
		}
		switch {
		case st.Signaled():
			j.s.sendOutput("console", fmt.Sprintf("%s (pid %d) was killed by %s\n", name, l.app.LauncherPid(), signalName(st.Signal())))
		default:
			j.s.sendOutput("console", fmt.Sprintf("%s (pid %d) exited with code %d\n", name, l.app.LauncherPid(), st.ExitCode()))
		}
	})
	return nil
}

// end finishes with the job: with kill, the ranks (already killed through the agents) and the
// launcher are ended; without, a launched job is left running (LetGo) and an attached one
// untouched. The launch front end is closed either way.
func (l *wlmLauncher) end(kill bool) {
	l.endOnce.Do(func() {
		if l.app == nil {
			return
		}
		if kill {
			ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
			if err := l.app.Kill(ctx, syscall.SIGKILL); err != nil {
				l.logger.Printf("adapter: end the job %s: %v", l.app.ID(), err)
			}
			cancel()
			// Give the launcher a moment to see its ranks gone, so that its last words and
			// its exit status reach the client.
			done := make(chan struct{})
			go func() { l.watched.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		} else {
			l.app.LetGo()
		}
		if l.cancel != nil {
			l.cancel()
		}
		l.watched.Wait()
		if err := l.app.Deregister(); err != nil {
			l.logger.Printf("adapter: %v", err)
		}
		if err := l.fe.Close(); err != nil {
			l.logger.Printf("adapter: %v", err)
		}
	})
}

// launcherLabel reads the rank labels launchers put on their ranks' output lines: Open MPI's
// --tag-output ("[1,3]<stdout>:"), hydra's -prepend-rank ("[3] ") and srun's --label ("3: ").
var launcherLabel = regexp.MustCompile(`^(?:\[\d+,(\d+)\]<(stdout|stderr|stddiag)>:|\[(\d+)\] |\s*(\d+): )`)

// relabel turns a launcher's labelled line into the adapter's "[3] text" form and its category.
func relabel(line string) (category, text string) {
	m := launcherLabel.FindStringSubmatchIndex(line)
	if m == nil {
		return "stdout", line
	}
	sub := func(i int) string {
		if m[2*i] < 0 {
			return ""
		}
		return line[m[2*i]:m[2*i+1]]
	}
	rank := sub(1) + sub(3) + sub(4)
	category = "stdout"
	if s := sub(2); s == "stderr" || s == "stddiag" {
		category = "stderr"
	}
	return category, "[" + rank + "] " + line[m[1]:]
}

// forwardLauncherOutput follows the launcher's output file and sends each line as an output
// event, until ctx ends, or stop is closed and the file has no more to give.
func forwardLauncherOutput(ctx context.Context, path string, stop <-chan struct{}, send func(category, text string)) {
	var f *os.File
	for f == nil {
		var err error
		if f, err = os.Open(path); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var partial string
	stopping := false
	for {
		line, err := br.ReadString('\n')
		if err == nil || (line != "" && stopping) {
			cat, text := relabel(partial + line)
			partial = ""
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			send(cat, text)
			continue
		}
		partial += line
		if err != io.EOF {
			return
		}
		if stopping {
			if partial != "" {
				cat, text := relabel(partial)
				send(cat, text+"\n")
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			stopping = true // one more pass to the end of the file
		case <-time.After(50 * time.Millisecond):
		}
	}
}
