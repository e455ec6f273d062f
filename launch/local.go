package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

func init() { RegisterWLM("local", func() WLM { return localWLM{} }) }

// localWLM runs jobs on this host with Open MPI's mpirun or MPICH's mpiexec.hydra; the host is
// the only node, reached without any remote execution.
type localWLM struct{}

func (localWLM) Name() string     { return "local" }
func (localWLM) Available() error { return nil }

// Launch starts a job with the protocol its launcher offers (chooseProtocol): Open MPI 4's
// mpirun is driven through MPIR by its exported symbols (ranks held in MPI_Init); Open MPI 5's
// mpirun and PRRTE's prterun and prun, which have no MPIR, through the PMIx tool interface
// (ranks held at their exec); MPICH's mpiexec.hydra, whose MPIR symbols are not usable, is
// followed through its forks and execs, each rank held at its exec (HoldByAgent).
func (localWLM) Launch(ctx context.Context, fe *Frontend, spec LaunchSpec, barrier bool) (Job, error) {
	name := spec.Launcher
	if name == "" {
		name = "mpirun"
	}
	path, family, err := launcherPath(name)
	if err != nil {
		return nil, err
	}
	if family == "srun" {
		return nil, fmt.Errorf("launch: launcher %s: srun needs the slurm workload manager", name)
	}
	proto, err := chooseProtocol(ctx, fe, path, family, spec.Protocol)
	if err != nil {
		return nil, err
	}
	argv := append(append(append([]string{path}, spec.Args...), spec.Program), spec.ProgramArgs...)
	var j Job
	switch proto {
	case ProtocolMPIR:
		mj, err := launchMPIR(ctx, fe, family, argv, spec)
		if err != nil {
			return nil, err
		}
		mj.hold = HoldInInit
		if mj.jobNodes, err = localJobNodes(fe, mj.procs); err != nil {
			mj.Kill(ctx, syscall.SIGKILL)
			mj.Close()
			return nil, fmt.Errorf("launch: %s: %w", mj.id, err)
		}
		j = mj
	case ProtocolPMIx:
		pj, err := launchPMIx(ctx, fe, path, spec)
		if err != nil {
			return nil, err
		}
		if pj.jobNodes, err = pmixJobNodes(fe, pj.procs); err != nil {
			pj.Kill(ctx, syscall.SIGKILL)
			pj.Close()
			return nil, fmt.Errorf("launch: %s: %w", pj.id, err)
		}
		j = pj
	case ProtocolFollow:
		if j, err = launchFollow(ctx, fe, argv, spec); err != nil {
			return nil, err
		}
	}
	if !barrier {
		if err := j.Release(ctx); err != nil {
			j.Close()
			return nil, err
		}
	}
	return j, nil
}

// Attach registers a running launcher of this host by its pid: through MPIR (Open MPI 4's
// mpirun, hydra at known offsets) or, for a PRRTE launcher without MPIR (Open MPI 5's mpirun
// runs as prte), through the PMIx tool interface.
func (localWLM) Attach(ctx context.Context, fe *Frontend, ref JobRef) (Job, error) {
	if ref.LauncherPid == 0 {
		return nil, errors.New("launch: the local workload manager attaches by launcher pid only")
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(ref.LauncherPid) + "/exe")
	if err != nil {
		return nil, fmt.Errorf("launch: attach to launcher pid %d: %w", ref.LauncherPid, err)
	}
	_, family, _ := launcherPath(exe)
	if family == "prrte" || family == "openmpi" {
		if o := probeLauncher(ctx, exe, family); !o.mpir && o.pmix != "" {
			pj, err := attachPMIx(ctx, fe, ref.LauncherPid, exe, ref.Nspace)
			if err != nil {
				return nil, err
			}
			if pj.jobNodes, err = pmixJobNodes(fe, pj.procs); err != nil {
				pj.Close()
				return nil, fmt.Errorf("launch: %s: %w", pj.id, err)
			}
			return pj, nil
		}
	}
	if ref.Nspace != "" {
		return nil, fmt.Errorf("launch: attach to PMIx namespace %s: launcher pid %d (%s) is not a PMIx launcher", ref.Nspace, ref.LauncherPid, exe)
	}
	j, err := attachMPIR(ctx, fe, ref.LauncherPid)
	if err != nil {
		return nil, err
	}
	if j.jobNodes, err = localJobNodes(fe, j.procs); err != nil {
		j.Close()
		return nil, fmt.Errorf("launch: %s: %w", j.id, err)
	}
	return j, nil
}

// localJobNodes is this host as the nodes of a job whose ranks must all run here.
func localJobNodes(fe *Frontend, procs []Proc) (jobNodes, error) {
	ln, err := newLocalNodes(fe)
	if err != nil {
		return jobNodes{&localNodes{fe: fe}}, err
	}
	return jobNodes{ln}, ln.checkLocal(procs)
}

// localNodes is this host as the only node.
type localNodes struct {
	fe   *Frontend
	host string
}

func newLocalNodes(fe *Frontend) (*localNodes, error) {
	h, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("launch: host name: %w", err)
	}
	return &localNodes{fe: fe, host: h}, nil
}

// checkLocal makes sure every rank runs on this host.
func (n *localNodes) checkLocal(procs []Proc) error {
	for _, p := range procs {
		if p.Host != n.host {
			return fmt.Errorf("rank %d runs on %s: the local workload manager reaches only %s", p.Rank, p.Host, n.host)
		}
	}
	return nil
}

func (n *localNodes) hosts() []string { return []string{n.host} }

func (n *localNodes) checkHosts(hosts []string) error {
	for _, h := range hosts {
		if h != n.host {
			return fmt.Errorf("launch: host %s: the local workload manager reaches only %s", h, n.host)
		}
	}
	return nil
}

// localStaging is a directory of this host.
type localStaging struct{ dir, host string }

func (n *localNodes) stage(_ context.Context, dir string) (Staging, error) {
	if err := MakeSessionDir(dir); err != nil {
		return nil, err
	}
	return localStaging{dir, n.host}, nil
}

// MakeSessionDir makes a session's directory on this host: dir itself, private to this user
// (it must not exist), with bin/, lib/ and tmp/.
func MakeSessionDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("launch: session directory: %w", err)
	}
	for _, sub := range []string{"bin", "lib", "tmp"} {
		if err := os.Mkdir(dir+"/"+sub, 0o700); err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("launch: session directory: %w", err)
		}
	}
	return nil
}

func (l localStaging) Stores() [][]string { return [][]string{{l.host}} }

// place copies files into the staging directory, with the directories they need, each with
// its source's permission bits: what the archive that other nodes receive would unpack.
func (l localStaging) place(files []ManifestFile) error {
	for _, f := range files {
		dst := filepath.Join(l.dir, f.Dest)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("launch: ship %s: %w", f.Source, err)
		}
		if err := copyFile(f.Source, dst); err != nil {
			return err
		}
	}
	return nil
}

func (l localStaging) Remove(context.Context) error {
	if err := os.RemoveAll(l.dir); err != nil {
		return fmt.Errorf("launch: remove %s: %w", l.dir, err)
	}
	return nil
}

func (n *localNodes) exec(ctx context.Context, hosts []string, argv []string) []NodeResult {
	out := make([]NodeResult, len(hosts))
	for i, h := range hosts {
		out[i].Host = h
		if err := n.checkHosts([]string{h}); err != nil {
			out[i].Err = err
			continue
		}
		b, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		out[i].Output = string(b)
		if err != nil {
			out[i].Err = fmt.Errorf("launch: %s on %s: %w", argv[0], h, err)
		}
	}
	return out
}

// ship copies src to dst on this host, keeping its permission bits.
func (n *localNodes) ship(_ context.Context, hosts []string, src, dst string) error {
	if err := n.checkHosts(hosts); err != nil {
		return err
	}
	return copyFile(src, dst)
}

// copyFile copies src to dst, a new file with src's permission bits.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("launch: ship %s: %w", src, err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("launch: ship %s: %w", src, err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return fmt.Errorf("launch: ship %s to %s: %w", src, dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("launch: ship %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

func (n *localNodes) start(_ context.Context, hosts []string, argv func(string) []string, env []string) (*DaemonSet, error) {
	if err := n.checkHosts(hosts); err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	for _, h := range hosts {
		a := argv(h)
		c := exec.Command(a[0], a[1:]...)
		c.Env = mergeEnv(os.Environ(), env)
		cmds = append(cmds, c)
	}
	logPath, err := n.fe.workFile("daemons-*.log")
	if err != nil {
		return nil, err
	}
	return startDaemonCmds(hosts, cmds, logPath)
}

func (n *localNodes) killRanks(_ context.Context, procs []Proc, sig syscall.Signal) error {
	var errs []error
	for _, p := range procs {
		if err := syscall.Kill(p.Pid, sig); err != nil && err != syscall.ESRCH {
			errs = append(errs, fmt.Errorf("launch: kill rank %d (pid %d): %w", p.Rank, p.Pid, err))
		}
	}
	return errors.Join(errs...)
}
