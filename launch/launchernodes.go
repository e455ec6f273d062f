package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// launcherNodes are the nodes of a PMIx job that runs on hosts other than this one, started
// with the local workload manager: the job's launcher reaches them (it starts hpcdap's agents
// there as its debugger daemons, and signals the ranks), this front end does not. Nothing is
// shipped to them: the agents run this front end's hpcdap binary, which must be installed at
// the same path on every node (a shared file system, or the same package), and each agent's
// daemon makes the session's directory on its node and has the agent remove it at its end.
type launcherNodes struct {
	fe    *Frontend
	nodes []string // in the order of the ranks
}

// errLauncherNodes says why a job's other nodes cannot be reached but through its launcher.
var errLauncherNodes = errors.New("the job's nodes other than this host are reached only through its launcher (debugger daemons)")

// pmixJobNodes is the nodes of a PMIx job the local workload manager started or found: this
// host when every rank runs here, else the nodes its launcher reaches.
func pmixJobNodes(fe *Frontend, procs []Proc) (jobNodes, error) {
	ln, err := newLocalNodes(fe)
	if err != nil {
		return jobNodes{&localNodes{fe: fe}}, err
	}
	if ln.checkLocal(procs) == nil {
		return jobNodes{ln}, nil
	}
	n := &launcherNodes{fe: fe}
	for _, p := range procs {
		if !contains(n.nodes, p.Host) {
			n.nodes = append(n.nodes, p.Host)
		}
	}
	fe.progressf("launch: the job runs on %d node(s) (%s): hpcdap's agents run there from %s, which must be at that path on each",
		len(n.nodes), joinHosts(n.nodes), fe.opts.AgentPath)
	return jobNodes{n}, nil
}

// joinHosts names hosts for a message, the first few of a long list.
func joinHosts(hosts []string) string {
	const most = 8
	if len(hosts) <= most {
		return fmt.Sprint(hosts)
	}
	return fmt.Sprintf("%v and %d more", hosts[:most], len(hosts)-most)
}

func (n *launcherNodes) hosts() []string { return append([]string(nil), n.nodes...) }

// stage makes nothing here: each agent's daemon makes the directory on its node.
func (n *launcherNodes) stage(_ context.Context, dir string) (Staging, error) {
	return launcherStaging{dir: dir, nodes: n.nodes}, nil
}

func (n *launcherNodes) exec(_ context.Context, hosts []string, argv []string) []NodeResult {
	out := make([]NodeResult, len(hosts))
	for i, h := range hosts {
		out[i] = NodeResult{Host: h, Err: fmt.Errorf("launch: %s on %s: %w", argv[0], h, errLauncherNodes)}
	}
	return out
}

func (n *launcherNodes) ship(_ context.Context, hosts []string, src, _ string) error {
	return fmt.Errorf("launch: ship %s to %v: %w", src, hosts, errLauncherNodes)
}

func (n *launcherNodes) start(context.Context, []string, func(string) []string, []string) (*DaemonSet, error) {
	return nil, fmt.Errorf("launch: start daemons: %w", errLauncherNodes)
}

// killRanks signals the ranks that run on this host; the others only the launcher reaches, and
// an error says so (the caller signals through the launcher as well).
func (n *launcherNodes) killRanks(_ context.Context, procs []Proc, sig syscall.Signal) error {
	here, _ := os.Hostname()
	var errs []error
	remote := 0
	for _, p := range procs {
		if p.Host != here {
			remote++
			continue
		}
		if err := syscall.Kill(p.Pid, sig); err != nil && err != syscall.ESRCH {
			errs = append(errs, fmt.Errorf("launch: kill rank %d (pid %d): %w", p.Rank, p.Pid, err))
		}
	}
	if remote > 0 {
		errs = append(errs, fmt.Errorf("launch: kill %d rank(s) on other nodes: %w", remote, errLauncherNodes))
	}
	return errors.Join(errs...)
}

// launcherStaging is the session directory of launcherNodes: one per node, made and removed
// there by the node's agent.
type launcherStaging struct {
	dir   string
	nodes []string
}

func (s launcherStaging) Stores() [][]string {
	out := make([][]string, len(s.nodes))
	for i, h := range s.nodes {
		out[i] = []string{h}
	}
	return out
}

// Remove has nothing to do: each node's agent removes its directory when it ends.
func (launcherStaging) Remove(context.Context) error { return nil }
