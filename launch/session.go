package launch

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Session is a staging directory with a unique name, the same path on every node of a job, with
// bin/, lib/ and tmp/. Manifests ship files into it; tool daemons run with PATH, LD_LIBRARY_PATH
// and TMPDIR pointing into it. Close (or the App's Deregister) stops the daemons and removes
// the directory from every node.
type Session struct {
	app   *App
	Dir   string   // the directory on every node
	Hosts []string // the nodes

	staging Staging

	mu      sync.Mutex
	shipped map[string]string // path in the session → source
	libDirs []string
	daemons []*DaemonSet
	stages  int
	closed  bool
}

func newSession(ctx context.Context, a *App) (*Session, error) {
	ctx, cancel := context.WithTimeout(ctx, a.fe.opts.Timeout)
	defer cancel()
	dir := filepath.Join(a.fe.opts.NodeTmpDir, "hpcdap-"+newToken()[:12])
	s := &Session{app: a, Dir: dir, Hosts: a.job.Hosts(), shipped: map[string]string{}}
	st, err := a.job.Stage(ctx, dir)
	if err != nil {
		return nil, err
	}
	s.staging = st
	return s, nil
}

// Stores groups the session's nodes by the directory they see (see Staging.Stores): one group
// per node when the directory is node-local, one group of every node when they share it.
func (s *Session) Stores() [][]string { return s.staging.Stores() }

// perHost turns per-node results into one error naming the nodes that failed and how many
// succeeded.
func perHost(what string, res []NodeResult) error {
	var failed []string
	for _, r := range res {
		if r.Err != nil {
			msg := r.Err.Error()
			if out := strings.TrimSpace(r.Output); out != "" {
				msg += ": " + out
			}
			failed = append(failed, r.Host+": "+msg)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("launch: %s: failed on %d of %d nodes: %s", what, len(failed), len(res), strings.Join(failed, "; "))
}

// Ship sends the files of m that the session does not have yet to every node, as one archive
// unpacked in place, and returns their session paths (empty when nothing was missing). A file
// whose session path already holds a different source is refused.
func (s *Session) Ship(ctx context.Context, m *Manifest) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("launch: ship: session closed")
	}
	var todo []ManifestFile
	for _, f := range m.Files() {
		if prev, ok := s.shipped[f.Dest]; ok {
			if !samePath(prev, f.Source) {
				return nil, fmt.Errorf("launch: ship: %s already holds %s, not %s", f.Dest, prev, f.Source)
			}
			continue
		}
		todo = append(todo, f)
	}
	newDirs := []string{}
	for _, d := range m.libDirs {
		if !contains(s.libDirs, d) {
			newDirs = append(newDirs, d)
		}
	}
	if len(todo) == 0 {
		s.libDirs = append(s.libDirs, newDirs...)
		return nil, nil
	}
	if p, ok := s.staging.(placer); ok {
		// The directory is on this host: the files go in without an archive.
		if err := p.place(todo); err != nil {
			return nil, err
		}
		return s.recordShipped(todo, newDirs, 1), nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.app.fe.opts.Timeout)
	defer cancel()
	archive, err := s.app.fe.workFile("stage-*.tar")
	if err != nil {
		return nil, fmt.Errorf("launch: ship: %w", err)
	}
	defer os.Remove(archive)
	if err := writeTar(archive, todo); err != nil {
		return nil, fmt.Errorf("launch: ship: %w", err)
	}
	s.stages++
	stage := s.Dir + "/tmp/.stage-" + strconv.Itoa(s.stages) + ".tar"
	// One copy per store: every node when each has its own directory (a broadcast), else the
	// first node of each shared store, which unpacks it for the others.
	var to []string
	unpack := s.Hosts
	if stores := s.staging.Stores(); len(stores) < len(s.Hosts) {
		for _, st := range stores {
			to = append(to, st[0])
		}
		unpack = to
	}
	if err := s.app.job.Ship(ctx, to, archive, stage); err != nil {
		return nil, err
	}
	res := s.app.job.Exec(ctx, unpack, []string{"sh", "-c", `tar -xf "$0" -C "$1" && rm -f "$0"`, stage, s.Dir})
	if err := perHost("unpack "+stage, res); err != nil {
		return nil, err
	}
	return s.recordShipped(todo, newDirs, len(unpack)), nil
}

// recordShipped records files as in the session (and the library directories they bring),
// says so, and returns their session paths. unpacked is the number of nodes that unpacked
// them. The caller holds s.mu.
func (s *Session) recordShipped(files []ManifestFile, newDirs []string, unpacked int) []string {
	var names []string
	for _, f := range files {
		s.shipped[f.Dest] = f.Source
		names = append(names, f.Dest)
	}
	s.app.fe.progressf("launch: %s: shipped %d file(s) to %d node(s), unpacked on %d", s.app.ID(), len(files), len(s.Hosts), unpacked)
	s.libDirs = append(s.libDirs, newDirs...)
	return names
}

// placer is a Staging whose directory is on this host: it takes files in place, without the
// archive that other nodes receive.
type placer interface {
	place(files []ManifestFile) error
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writeTar writes the files into a tar archive, with their permission bits and the
// directories they need.
func writeTar(path string, files []ManifestFile) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	dirs := map[string]bool{}
	var dirList []string
	for _, mf := range files {
		for d := filepath.Dir(mf.Dest); d != "." && d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			dirList = append(dirList, d)
		}
	}
	sort.Strings(dirList)
	now := time.Now()
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: now}); err != nil {
			f.Close()
			return err
		}
	}
	for _, mf := range files {
		if err := addTarFile(tw, mf); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func addTarFile(tw *tar.Writer, mf ManifestFile) error {
	in, err := os.Open(mf.Source)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: mf.Dest, Mode: int64(st.Mode().Perm()), Size: st.Size(),
		ModTime: st.ModTime()}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := io.Copy(tw, in); err != nil {
		return fmt.Errorf("%s: %w", mf.Source, err)
	}
	return nil
}

// Env is the environment a tool daemon gets: PATH, LD_LIBRARY_PATH and TMPDIR pointing into the
// session (ahead of the front end's own PATH and LD_LIBRARY_PATH), and HPCDAP_SESSION_DIR.
func (s *Session) Env() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := s.Dir + "/bin"
	if p := os.Getenv("PATH"); p != "" {
		path += ":" + p
	}
	lib := s.Dir + "/lib"
	for _, d := range s.libDirs {
		lib += ":" + s.Dir + "/" + d
	}
	if p := os.Getenv("LD_LIBRARY_PATH"); p != "" {
		lib += ":" + p
	}
	return []string{"PATH=" + path, "LD_LIBRARY_PATH=" + lib, "TMPDIR=" + s.Dir + "/tmp", "HPCDAP_SESSION_DIR=" + s.Dir}
}

// DaemonOptions configure ExecToolDaemon.
type DaemonOptions struct {
	Env []string // extra "K=V" variables
	// Args, when set, gives per-host arguments appended to argv (e.g. the ranks of that host).
	Args func(host string) []string
	// Hosts restricts the daemons to some of the session's nodes (default: all).
	Hosts []string
}

// ExecToolDaemon ships m (if not nil) and starts one daemon per node: argv, whose first word is
// looked up in the session's bin/ when it was shipped there, with the session environment.
func (s *Session) ExecToolDaemon(ctx context.Context, m *Manifest, argv []string, opts DaemonOptions) (*DaemonSet, error) {
	exe, err := s.daemonExe(ctx, m, argv)
	if err != nil {
		return nil, err
	}
	hosts := opts.Hosts
	if hosts == nil {
		hosts = s.Hosts
	}
	for _, h := range hosts {
		if !contains(s.Hosts, h) {
			return nil, fmt.Errorf("launch: tool daemon: %s is not a node of the session (%v)", h, s.Hosts)
		}
	}
	full := func(host string) []string {
		a := append([]string{exe}, argv[1:]...)
		if opts.Args != nil {
			a = append(a, opts.Args(host)...)
		}
		return a
	}
	env := mergeEnv(s.Env(), opts.Env)
	ctx, cancel := context.WithTimeout(ctx, s.app.fe.opts.Timeout)
	defer cancel()
	d, err := s.app.job.Start(ctx, hosts, full, env)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.daemons = append(s.daemons, d)
	s.mu.Unlock()
	return d, nil
}

// daemonExe ships m (if not nil) and returns the path of argv's program: in the session's
// bin/ when it was shipped there.
func (s *Session) daemonExe(ctx context.Context, m *Manifest, argv []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("launch: tool daemon: empty argv")
	}
	if m != nil {
		if _, err := s.Ship(ctx, m); err != nil {
			return "", err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", errors.New("launch: tool daemon: session closed")
	}
	exe := argv[0]
	if _, ok := s.shipped["bin/"+filepath.Base(exe)]; ok {
		exe = s.Dir + "/bin/" + filepath.Base(exe)
	}
	return exe, nil
}

// cospawnAgents ships m (if not nil) and has the job's launcher start the agent argv (`hpcdap
// agent ...` without --attach) on each node of the job as a debugger daemon (`hpcdap
// pmix-daemon`, which adds the node's ranks and execs the agent), with the session
// environment and env. Their output goes to a log file of the front end.
func (s *Session) cospawnAgents(ctx context.Context, m *Manifest, argv, env []string, cs daemonSpawner) (*DaemonSet, error) {
	if _, ok := s.staging.(launcherStaging); ok {
		m = nil // only the launcher reaches the nodes: the agents run the binary installed there
	}
	exe, err := s.daemonExe(ctx, m, argv)
	if err != nil {
		return nil, err
	}
	logPath, err := s.app.fe.workFile("daemons-*.log")
	if err != nil {
		return nil, err
	}
	// Not the front end's children, the agents end by themselves when it is gone.
	full := append(append([]string{exe, "pmix-daemon", "--log", logPath, "--", exe}, argv[1:]...), "--end-with-front-end")
	ctx, cancel := context.WithTimeout(ctx, s.app.fe.opts.Timeout)
	defer cancel()
	d, err := cs.spawnDaemons(ctx, s.Hosts, full, mergeEnv(s.Env(), env), logPath)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.daemons = append(s.daemons, d)
	s.mu.Unlock()
	return d, nil
}

// Close stops the session's daemons and removes its directory from every node.
func (s *Session) Close(ctx context.Context) error {
	err := s.finalize(ctx)
	s.app.mu.Lock()
	for i, x := range s.app.sessions {
		if x == s {
			s.app.sessions = append(s.app.sessions[:i], s.app.sessions[i+1:]...)
			break
		}
	}
	s.app.mu.Unlock()
	return err
}

func (s *Session) finalize(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	daemons := s.daemons
	s.mu.Unlock()
	for _, d := range daemons {
		d.Stop(10 * time.Second)
	}
	return s.staging.Remove(ctx)
}
