package adapter

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/symbols"
)

// share is a job and the clients that debug it: the client that launched or attached it and,
// when it has a name, those that joined it by that name (a shared session). Every job of the
// adapter has one. It is the job's debugger.Events: what the job reports goes to every
// member, each through its own jobEvents, so that each client keeps its own frame ids and
// variables references, lines and paths. Each member's breakpoints are its own (BPSet.Owner
// is its Conn's id); the job plants them all.
type share struct {
	srv      *Server
	name     string // "": not shared (it cannot be joined nor listed)
	uid      int    // the user of the client that started it: only that user may join
	program  string
	launched bool // launched (its end kills) rather than attached (its end detaches)
	ranks    int
	since    time.Time
	// ctx is the job's (debugger.Config.Ctx): cancelled when the job ends or its last
	// client's stream ends, not when one of several clients goes.
	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	job        *debugger.Job // nil until the launch or attach succeeded
	members    []jobEvents
	ended      bool
	terminated bool // the job reported its end (Terminated)
}

// newShare makes the share of a job s is about to start, with s its one member.
func (s *Conn) newShare(name string, launched bool) *share {
	sh := &share{srv: s.srv, name: name, uid: s.peerUID, launched: launched, members: []jobEvents{s.events()}}
	sh.ctx, sh.cancel = context.WithCancel(context.Background())
	sh.watch(s)
	s.mu.Lock()
	s.share = sh
	s.mu.Unlock()
	return sh
}

// watch cancels the job's context as soon as the stream of its last client ends (before that
// client's requests are through), so that work of the job that client was waiting for does
// not outlive it; while other clients remain, the job's work goes on.
func (sh *share) watch(s *Conn) {
	context.AfterFunc(s.ctx, func() {
		sh.mu.Lock()
		last := len(sh.members) == 0 || len(sh.members) == 1 && sh.members[0].s == s
		sh.mu.Unlock()
		if last {
			sh.cancel()
		}
	})
}

// SessionInfo is one shared session as hpcdap/sessions and `hpcdap serve --list` report it.
type SessionInfo struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // "launch" or "attach"
	Program string `json:"program"`
	Ranks   int    `json:"ranks"`
	Clients int    `json:"clients"`
	// Since is when the job started, RFC 3339.
	Since string `json:"since"`
}

// SessionsBody is hpcdap/sessions's response body.
type SessionsBody struct {
	Sessions []SessionInfo `json:"sessions"`
}

// reserve takes the share's name in the server before its job starts, so that two launches
// cannot both claim it.
func (sh *share) reserve() error {
	if sh.name == "" {
		return nil
	}
	if sh.uid < 0 {
		return fmt.Errorf("sessionName %q: the user of this connection is not known, and a session is shared with its user only", sh.name)
	}
	srv := sh.srv
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if o := srv.named[sh.name]; o != nil {
		return fmt.Errorf("sessionName %q is taken by a running session: choose another name, or join it with \"joinSession\"", sh.name)
	}
	srv.named[sh.name] = sh
	return nil
}

// unregister gives the share's name back.
func (sh *share) unregister() {
	if sh.name == "" {
		return
	}
	srv := sh.srv
	srv.mu.Lock()
	if srv.named[sh.name] == sh {
		delete(srv.named, sh.name)
	}
	srv.mu.Unlock()
}

// handOver passes the share's name to next, the share of the job a restart started.
func (sh *share) handOver(next *share) {
	next.name = sh.name
	sh.mu.Lock()
	sh.ended = true
	sh.mu.Unlock()
	sh.cancel()
	if next.name == "" {
		return
	}
	srv := sh.srv
	srv.mu.Lock()
	srv.named[next.name] = next
	srv.mu.Unlock()
}

// started records the job once its launch or attach succeeded.
func (sh *share) started(j *debugger.Job, program string) {
	sh.mu.Lock()
	sh.job, sh.program, sh.ranks, sh.since = j, program, len(j.Ranks()), time.Now()
	sh.mu.Unlock()
}

// abandon ends a share whose job never started.
func (sh *share) abandon() {
	sh.unregister()
	sh.cancel()
}

// info describes the share for a listing.
func (sh *share) info() SessionInfo {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	kind := "attach"
	if sh.launched {
		kind = "launch"
	}
	return SessionInfo{Name: sh.name, Kind: kind, Program: sh.program, Ranks: sh.ranks, Clients: len(sh.members),
		Since: sh.since.UTC().Format(time.RFC3339)}
}

// sessionsOf lists the shared sessions whose job runs and that the user uid may join, by name.
func (srv *Server) sessionsOf(uid int) []SessionInfo {
	if uid < 0 {
		return []SessionInfo{} // a peer of unknown user owns nothing
	}
	srv.mu.Lock()
	var list []*share
	for _, sh := range srv.named {
		if sh.uid == uid {
			list = append(list, sh)
		}
	}
	srv.mu.Unlock()
	out := []SessionInfo{}
	for _, sh := range list {
		sh.mu.Lock()
		live := sh.job != nil && !sh.ended && !sh.terminated
		sh.mu.Unlock()
		if live {
			out = append(out, sh.info())
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// join makes s a member of the shared session named name, checking that s's user is the
// session's; it returns the session and its job.
func (s *Conn) join(name string) (*share, *debugger.Job, error) {
	srv := s.srv
	srv.mu.Lock()
	sh := srv.named[name]
	srv.mu.Unlock()
	if sh == nil {
		return nil, nil, fmt.Errorf("joinSession %q: no running session has this name (hpcdap serve --list, or the hpcdap/sessions request, lists them)", name)
	}
	switch {
	case s.peerUID < 0:
		return nil, nil, fmt.Errorf("joinSession %q: the user of this connection is not known, and only the session's user may join it", name)
	case s.peerUID != sh.uid:
		return nil, nil, fmt.Errorf("joinSession %q: this connection runs as uid %d, the session as uid %d: only its user may join it", name, s.peerUID, sh.uid)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.job == nil || sh.ended || sh.terminated {
		return nil, nil, fmt.Errorf("joinSession %q: the session's job has not started yet or has ended", name)
	}
	sh.members = append(sh.members, s.events())
	s.mu.Lock()
	s.share = sh
	s.mu.Unlock()
	sh.watch(s)
	return sh, sh.job, nil
}

// memberCount returns how many clients debug the job.
func (sh *share) memberCount() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.members)
}

// leave takes s out of the session. A terminate that the client asked for (terminate not nil
// and true) ends the job for every client; otherwise the job goes on while other clients
// remain (s's breakpoints are taken out), and the last client to leave ends it as a
// disconnect would: killed if launched, left running if attached, unless terminate says.
func (sh *share) leave(s *Conn, terminate *bool) {
	sh.mu.Lock()
	sh.members = slices.DeleteFunc(sh.members, func(m jobEvents) bool { return m.s == s })
	left := len(sh.members)
	j := sh.job
	sh.mu.Unlock()
	endAll := terminate != nil && *terminate
	if j == nil {
		if left == 0 {
			sh.abandon()
		}
		return
	}
	if !endAll && left > 0 {
		ctx, cancel := context.WithTimeout(sh.ctx, debugger.DefaultTimeout)
		j.RemoveBreakpointsOf(ctx, s.id)
		cancel()
		sh.Output("console", "A client left the session; it goes on\n", -1)
		return
	}
	kill := sh.launched
	if terminate != nil {
		kill = *terminate
	}
	sh.end(kill)
}

// end ends the job once, for every client: those still there are told it terminated.
func (sh *share) end(kill bool) {
	sh.mu.Lock()
	if sh.ended {
		sh.mu.Unlock()
		return
	}
	sh.ended = true
	j := sh.job
	sh.mu.Unlock()
	sh.unregister()
	sh.cancel()
	j.End(kill)
	sh.mu.Lock()
	told := sh.terminated
	sh.terminated = true
	members := slices.Clone(sh.members)
	sh.mu.Unlock()
	if !told {
		for _, m := range members {
			m.Terminated()
		}
	}
}

// each returns the members to report to.
func (sh *share) each() []jobEvents {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return slices.Clone(sh.members)
}

// The share reports the job's events to every member (debugger.Events).

func (sh *share) Output(category, text string, rank int) {
	for _, m := range sh.each() {
		m.Output(category, text, rank)
	}
}

// Stopped reports a stop to every member; each member's event names only the breakpoints hit
// that it set (the job knows each breakpoint's owner).
func (sh *share) Stopped(ev debugger.StopEvent) {
	members := sh.each()
	sh.mu.Lock()
	j := sh.job
	sh.mu.Unlock()
	for _, m := range members {
		e := ev
		if len(ev.HitBPs) > 0 && len(members) > 1 && j != nil {
			e.HitBPs = slices.DeleteFunc(slices.Clone(ev.HitBPs), func(id int) bool {
				owner, ok := j.BreakpointOwner(id)
				return ok && owner != m.s.id
			})
		}
		m.Stopped(e)
	}
}

func (sh *share) Continued(threadID int) {
	for _, m := range sh.each() {
		m.Continued(threadID)
	}
}

func (sh *share) Exited(code int) {
	for _, m := range sh.each() {
		m.Exited(code)
	}
}

// Terminated reports the job's end, once. The session is then over for joining and listing,
// and its name free for a new one, though clients may still be connected to it.
func (sh *share) Terminated() {
	sh.mu.Lock()
	told := sh.terminated
	sh.terminated = true
	sh.mu.Unlock()
	if told {
		return
	}
	sh.unregister()
	for _, m := range sh.each() {
		m.Terminated()
	}
}

// BreakpointChanged reports a breakpoint to the member that set it.
func (sh *share) BreakpointChanged(bp *debugger.Breakpoint) {
	for _, m := range sh.each() {
		if m.s.id == bp.Owner {
			m.BreakpointChanged(bp)
		}
	}
}

func (sh *share) RanksChanged(ranks []debugger.RankStatus) {
	for _, m := range sh.each() {
		m.RanksChanged(ranks)
	}
}

func (sh *share) StopOver(rank int) {
	for _, m := range sh.each() {
		m.StopOver(rank)
	}
}

func (sh *share) ModuleLoaded(mod *symbols.Module) {
	for _, m := range sh.each() {
		m.ModuleLoaded(mod)
	}
}

func (sh *share) Logf(format string, args ...any) { sh.srv.logf(format, args...) }

// othersContinued tells the members other than s that threadID (with all: every thread)
// runs again because s resumed it: s itself learns it from its request's response.
func (sh *share) othersContinued(s *Conn, threadID int, all bool) {
	sh.mu.Lock()
	j := sh.job
	sh.mu.Unlock()
	for _, m := range sh.each() {
		m.s.catch.continued(j, threadID, all)
		if m.s != s && !m.stale() {
			m.s.send(continuedEvent(threadID, all))
		}
	}
}
