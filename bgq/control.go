package bgq

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The emulated runjob server's control socket, <root>/runjob.<jobId>: what start_tool and
// end_tool ask of a running job. One JSON request and one JSON answer per connection. As
// BG/Q's start_tool and end_tool find a job by the pid of its runjob on the front end too, a
// link in the user's default root, runjob-pid.<pid>, leads to the socket whatever the job's
// root (PidPath).

// controlRequest is a start_tool or end_tool request.
type controlRequest struct {
	Op   string   `json:"op"` // "start_tool" or "end_tool"
	Tool string   `json:"tool,omitempty"`
	Args []string `json:"args,omitempty"`
	ID   uint32   `json:"id,omitempty"`
}

// controlReply answers a controlRequest.
type controlReply struct {
	ID    uint32 `json:"id,omitempty"`
	Job   uint64 `json:"job,omitempty"` // the job's id
	Error string `json:"error,omitempty"`
}

// ControlPath is the control socket of job id under root.
func ControlPath(root string, id uint64) string {
	return filepath.Join(root, "runjob."+strconv.FormatUint(id, 10))
}

// PidPath is the link to the control socket of the job of runjob pid pid.
func PidPath(pid int) string {
	return filepath.Join(DefaultRoot(), "runjob-pid."+strconv.Itoa(pid))
}

// EndToolGrace is how long end_tool waits after SIGTERM before killing a tool.
const EndToolGrace = 10 * time.Second

// ServeControl listens on the job's control socket under its root until the job is closed,
// with its link by runjob's pid (PidPath) when runjobPid is not 0.
func ServeControl(j *Job, runjobPid int) error {
	path := ControlPath(j.cfg.Root, j.cfg.JobID)
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("bgq: job %d: control socket: %w", j.cfg.JobID, err)
	}
	link := ""
	if runjobPid != 0 {
		link = PidPath(runjobPid)
		if err := makeRoot(filepath.Dir(link)); err != nil {
			ln.Close()
			return fmt.Errorf("bgq: job %d: control socket link: %w", j.cfg.JobID, err)
		}
		os.Remove(link) // a runjob of that pid that ended without removing it
		if err := os.Symlink(path, link); err != nil {
			ln.Close()
			return fmt.Errorf("bgq: job %d: control socket link: %w", j.cfg.JobID, err)
		}
	}
	go func() {
		<-j.done
		ln.Close()
		os.Remove(path)
		if link != "" {
			os.Remove(link)
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go j.serveControl(c)
		}
	}()
	return nil
}

// serveControl answers one request.
func (j *Job) serveControl(c net.Conn) {
	defer c.Close()
	var req controlRequest
	rep := controlReply{Job: j.cfg.JobID}
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&req); err != nil {
		rep.Error = fmt.Sprintf("bad request: %v", err)
	} else {
		switch req.Op {
		case "start_tool":
			id, err := j.StartTool(req.Tool, req.Args)
			if err != nil {
				rep.Error = err.Error()
			}
			rep.ID = id
		case "end_tool":
			if err := j.EndTool(req.ID, EndToolGrace); err != nil {
				rep.Error = err.Error()
			}
			rep.ID = req.ID
		default:
			rep.Error = fmt.Sprintf("unknown operation %q", req.Op)
		}
	}
	json.NewEncoder(c).Encode(rep)
}

// JobRef names a running job for start_tool and end_tool: by its id under the emulator's
// root, or by the pid of its runjob.
type JobRef struct {
	Root string
	ID   uint64
	Pid  int // when not 0, the job of runjob pid Pid (Root and ID unused)
}

// String names the job in messages: by its runjob's pid or by its id.
func (r JobRef) String() string {
	if r.Pid != 0 {
		return fmt.Sprintf("the job of runjob pid %d", r.Pid)
	}
	return fmt.Sprintf("job %d", r.ID)
}

// path is the socket of the job's runjob control: PidPath of its pid, or ControlPath of
// its id under Root.
func (r JobRef) path() string {
	if r.Pid != 0 {
		return PidPath(r.Pid)
	}
	return ControlPath(r.Root, r.ID)
}

// ask sends one request to the runjob of job.
func ask(job JobRef, req controlRequest) (controlReply, error) {
	var rep controlReply
	c, err := net.Dial("unix", job.path())
	if err != nil {
		return rep, fmt.Errorf("bgq: %s %s: %w", req.Op, job, err)
	}
	defer c.Close()
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return rep, fmt.Errorf("bgq: %s %s: %w", req.Op, job, err)
	}
	if err := json.NewDecoder(c).Decode(&rep); err != nil {
		return rep, fmt.Errorf("bgq: %s %s: %w", req.Op, job, err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("bgq: %s %s: %s", req.Op, job, rep.Error)
	}
	return rep, nil
}

// StartTool asks the runjob of job id under root to start a tool (start_tool) and returns its
// tool id.
func StartTool(root string, id uint64, path string, args []string) (uint32, error) {
	tool, _, err := StartToolOf(JobRef{Root: root, ID: id}, path, args)
	return tool, err
}

// StartToolOf is StartTool for the job ref names; it returns the tool's id and the job's.
func StartToolOf(job JobRef, path string, args []string) (tool uint32, id uint64, err error) {
	if path == "" {
		return 0, 0, errors.New("bgq: start_tool: no tool")
	}
	if !filepath.IsAbs(path) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return 0, 0, fmt.Errorf("bgq: start_tool %s: %w", path, err)
		}
		path = abs
	}
	rep, err := ask(job, controlRequest{Op: "start_tool", Tool: path, Args: args})
	return rep.ID, rep.Job, err
}

// EndTool asks the runjob of job id under root to end tool toolID (SIGTERM; end_tool).
func EndTool(root string, id uint64, toolID uint32) error {
	return EndToolOf(JobRef{Root: root, ID: id}, toolID)
}

// EndToolOf is EndTool for the job ref names.
func EndToolOf(job JobRef, toolID uint32) error {
	_, err := ask(job, controlRequest{Op: "end_tool", ID: toolID})
	return err
}
