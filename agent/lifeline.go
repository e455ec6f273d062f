package agent

import (
	"os"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/target"
	"github.com/hpcdap/hpcdap/target/ptrace"
)

// Kill on exit (Config.KillOnExit, `hpcdap agent --kill-on-exit`). Without it an agent that
// ends lets what it spawned go on running, untraced and without traps; with it, what the agent
// spawned dies with the session, as the jobs a CTI front end launches die with the tool:
//
//   - front end lost: once a front end has connected (an authenticated CDTI connection or a
//     management connection past hello), the agent ends killing everything it spawned when
//     the last such connection closes. A front end keeps one connection open for the session.
//     An explicit management "shutdown" keeps its own kill setting.
//   - SIGTERM, SIGINT, SIGHUP and the death of the agent's parent (the command sets
//     PR_SET_PDEATHSIG) end the agent the same way (see cmd/hpcdap).
//   - the agent killed outright: processes spawned through target/ptrace carry
//     PTRACE_O_EXITKILL, so the kernel kills them when the tracer's thread ends.
//
// Attached processes (--attach) are never killed by this: they were not the agent's to start.

// lifeline counts the front end's open connections.
type lifeline struct {
	mu     sync.Mutex
	open   int
	seen   bool // a front end has connected at least once
	ending bool // an explicit shutdown was asked: its kill setting stands
}

// frontEndOpened records an authenticated front-end connection.
func (a *Agent) frontEndOpened() {
	a.life.mu.Lock()
	a.life.open++
	a.life.seen = true
	a.life.mu.Unlock()
}

// frontEndClosed records the end of an authenticated front-end connection; with KillOnExit,
// the last one ends the agent, killing what it spawned, with EndWithFrontEnd detaching.
func (a *Agent) frontEndClosed() {
	a.life.mu.Lock()
	a.life.open--
	lost := (a.killOnExit || a.endWithFE) && a.life.open == 0 && a.life.seen && !a.life.ending
	a.life.mu.Unlock()
	switch {
	case lost && a.killOnExit:
		a.logf("agent: the front end's last connection closed: killing what the agent spawned (--kill-on-exit)")
		go a.Shutdown(true)
	case lost:
		a.logf("agent: the front end's last connection closed: detaching from every process (--end-with-front-end)")
		go a.Shutdown(false)
	}
}

// expectFrontEnd ends an agent that ends with its front end (EndWithFrontEnd) when no front
// end has connected within limit of its registration: a front end that died in between would
// otherwise leave it waiting, and its ranks' launcher with it, until the job ends.
func (a *Agent) expectFrontEnd(limit time.Duration) {
	time.AfterFunc(limit, func() {
		a.life.mu.Lock()
		gone := !a.life.seen && !a.life.ending
		a.life.mu.Unlock()
		if gone {
			a.logf("agent: no front end connected within %v of the registration: detaching from every process (--end-with-front-end)", limit)
			a.Shutdown(false)
		}
	})
}

// explicitShutdown marks a shutdown asked for on the management plane, so that the closing of
// the connections it causes does not turn it into a kill, and stops the tree overlay's
// healing before the answer: the front end then ends this agent's children, whose end is no
// loss (see Router.StopHealing).
func (a *Agent) explicitShutdown() {
	a.router.StopHealing()
	a.life.mu.Lock()
	a.life.ending = true
	a.life.mu.Unlock()
}

// forkBackend is what a back end offers beyond Backend for following a launcher's forks and
// for having spawned processes killed by the kernel if the agent dies: target/ptrace's Tracer.
type forkBackend interface {
	SpawnWith(argv, env []string, dir string, stdio []*os.File, opts ptrace.SpawnOptions) (target.Process, error)
	Adopt(pid int, opts ptrace.AdoptOptions) (target.Process, error)
}

// spawnOne starts one process through the back end, with PTRACE_O_EXITKILL under KillOnExit
// when the back end offers it.
func (a *Agent) spawnOne(argv, env []string, dir string, stdio []*os.File) (target.Process, error) {
	if fb, ok := a.backend.(forkBackend); ok && a.killOnExit {
		return fb.SpawnWith(argv, env, dir, stdio, ptrace.SpawnOptions{ExitKill: true})
	}
	return a.backend.Spawn(argv, env, dir, stdio)
}
