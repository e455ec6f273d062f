package agent

import (
	"context"
	"sync"

	"github.com/hpcdap/hpcdap/cdti"
	"github.com/sourcegraph/jsonrpc2"
)

// LauncherInfo describes the job's launcher process (management call "launcher").
type LauncherInfo struct {
	Pid        int    `json:"pid"`
	Executable string `json:"executable"`
	State      string `json:"state"`                // as RankInfo.State
	ExitStatus *int   `json:"exitStatus,omitempty"` // POSIX wait status once exited
	// Rank is the CDTI rank number the launcher is served under (SpawnSpec.Launcher); absent
	// when it is not served on CDTI (FollowExec: the agent only follows it).
	Rank *int `json:"rank,omitempty"`
	// Ranks counts the ranks caught so far (FollowExec).
	Ranks int `json:"ranks"`
}

// CapabilityLauncher is announced in HelloResult.Capabilities when the agent has a launcher
// (SpawnSpec.Launcher or FollowExec): the management call "launcher" describes it.
const CapabilityLauncher = "launcher"

// launcherRec is the agent's launcher: a served process (proc) or a followed one.
type launcherRec struct {
	pid  int
	proc *proc // served on CDTI (SpawnSpec.Launcher); nil when followed

	mu     sync.Mutex // guards the followed launcher's state below
	exe    string
	exited bool
	status int
}

func (a *Agent) setLauncher(l *launcherRec) {
	a.mu.Lock()
	a.launcher = l
	a.mu.Unlock()
}

// LauncherInfo describes the launcher; ok is false when the agent has none.
func (a *Agent) LauncherInfo() (info LauncherInfo, ok bool) {
	a.mu.Lock()
	l := a.launcher
	n := len(a.procs)
	a.mu.Unlock()
	if l == nil {
		return LauncherInfo{}, false
	}
	if l.proc != nil {
		s := l.proc.snapshot()
		r := s.Rank
		return LauncherInfo{Pid: s.Pid, Executable: s.Executable, State: s.State, ExitStatus: s.ExitStatus, Rank: &r}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	info = LauncherInfo{Pid: l.pid, Executable: l.exe, State: "running", Ranks: n}
	if l.exited {
		st := l.status
		info.State, info.ExitStatus = "exited", &st
	}
	return info, true
}

// rankSubs are the management connections that asked to hear of every rank (ranks.subscribe).
// The agent gains ranks over time when it follows a launcher (FollowExec).
//
// ranks.subscribe: params {}, result {}; then one JSON-RPC notification "rank" (params: a
// RankInfo) for every rank the agent serves, the current ones first (by rank), then each new
// one as it is added. The state is the rank's when it was added ("loaded" for a rank held at
// its exec).
type rankSubs struct {
	mu   sync.Mutex
	subs map[*jsonrpc2.Conn]chan RankInfo
}

// add subscribes conn: it is sent every current rank, then every new one.
func (rs *rankSubs) add(a *Agent, conn *jsonrpc2.Conn) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.subs == nil {
		rs.subs = make(map[*jsonrpc2.Conn]chan RankInfo)
	}
	if rs.subs[conn] != nil {
		return
	}
	// A rank is added once and a node holds at most MaxRanksPerNode: the channel never fills.
	ch := make(chan RankInfo, cdti.MaxRanksPerNode)
	for _, r := range a.RankInfos() {
		ch <- r
	}
	rs.subs[conn] = ch
	go func() {
		for {
			select {
			case r := <-ch:
				if err := conn.Notify(context.Background(), RankNotification, r); err != nil {
					return
				}
			case <-conn.DisconnectNotify():
				return
			}
		}
	}()
}

// remove forgets conn (its connection ended).
func (rs *rankSubs) remove(conn *jsonrpc2.Conn) {
	rs.mu.Lock()
	delete(rs.subs, conn)
	rs.mu.Unlock()
}

// RankNotification is the method of the management notification that announces a rank.
const RankNotification = "rank"

// announce queues r to every subscriber. Called with rs.mu held (see addProc).
func (rs *rankSubs) announceLocked(r RankInfo) {
	for _, ch := range rs.subs {
		select {
		case ch <- r:
		default: // cannot happen (see add); never block the agent on a subscriber
		}
	}
}

// ranksSubscribeAccepted is handle's answer to "ranks.subscribe": Handle replies, then
// subscribes, so that the notifications follow the result.
type ranksSubscribeAccepted struct{}
