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
// end_tool ask of a running job. One JSON request and one JSON answer per connection.

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
	Error string `json:"error,omitempty"`
}

// ControlPath is the control socket of job id under root.
func ControlPath(root string, id uint64) string {
	return filepath.Join(root, "runjob."+strconv.FormatUint(id, 10))
}

// EndToolGrace is how long end_tool waits after SIGTERM before killing a tool.
const EndToolGrace = 10 * time.Second

// ServeControl listens on the job's control socket under its root until the job is closed.
func ServeControl(j *Job) error {
	path := ControlPath(j.cfg.Root, j.cfg.JobID)
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("bgq: job %d: control socket: %w", j.cfg.JobID, err)
	}
	go func() {
		<-j.done
		ln.Close()
		os.Remove(path)
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
	var rep controlReply
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

// ask sends one request to job id's runjob under root.
func ask(root string, id uint64, req controlRequest) (controlReply, error) {
	var rep controlReply
	c, err := net.Dial("unix", ControlPath(root, id))
	if err != nil {
		return rep, fmt.Errorf("bgq: %s job %d: %w", req.Op, id, err)
	}
	defer c.Close()
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return rep, fmt.Errorf("bgq: %s job %d: %w", req.Op, id, err)
	}
	if err := json.NewDecoder(c).Decode(&rep); err != nil {
		return rep, fmt.Errorf("bgq: %s job %d: %w", req.Op, id, err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("bgq: %s job %d: %s", req.Op, id, rep.Error)
	}
	return rep, nil
}

// StartTool asks the runjob of job id under root to start a tool (start_tool) and returns its
// tool id.
func StartTool(root string, id uint64, path string, args []string) (uint32, error) {
	if path == "" {
		return 0, errors.New("bgq: start_tool: no tool")
	}
	if !filepath.IsAbs(path) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return 0, fmt.Errorf("bgq: start_tool %s: %w", path, err)
		}
		path = abs
	}
	rep, err := ask(root, id, controlRequest{Op: "start_tool", Tool: path, Args: args})
	return rep.ID, err
}

// EndTool asks the runjob of job id under root to end tool toolID (SIGTERM; end_tool).
func EndTool(root string, id uint64, toolID uint32) error {
	_, err := ask(root, id, controlRequest{Op: "end_tool", ID: toolID})
	return err
}
