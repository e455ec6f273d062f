package rsp

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// threadID is a protocol thread id: `p<pid>.<tid>` with multiprocess extensions, else `<tid>`
// (hexadecimal). -1 means all threads, 0 any thread.
type threadID struct {
	pid int // 0 when the id had no process part
	tid int
}

// parseThreadID parses a thread id.
func parseThreadID(s string) (threadID, error) {
	var id threadID
	if strings.HasPrefix(s, "p") {
		p, t, ok := strings.Cut(s[1:], ".")
		pid, err := parseID(p)
		if err != nil {
			return id, fmt.Errorf("thread id %q: %w", s, err)
		}
		id.pid = pid
		if !ok {
			id.tid = -1 // p<pid> alone: every thread of the process
			return id, nil
		}
		s = t
	}
	tid, err := parseID(s)
	if err != nil {
		return id, fmt.Errorf("thread id %q: %w", s, err)
	}
	id.tid = tid
	return id, nil
}

// parseID parses one hexadecimal id, where "-1" means all.
func parseID(s string) (int, error) {
	if s == "-1" {
		return -1, nil
	}
	v, err := strconv.ParseUint(s, 16, 31)
	return int(v), err
}

// stopReply is a decoded stop reply packet (T, S, W or X).
type stopReply struct {
	Kind      byte     // 'T', 'S', 'W' (exited) or 'X' (killed)
	Signal    int      // protocol signal number (T, S, X)
	Status    int      // exit status (W)
	Thread    threadID // T: the thread that stopped
	HasThread bool
	Pid       int            // W, X: "process:" part
	Regs      map[int][]byte // T: expedited registers, raw
	Watch     string         // "watch", "rwatch" or "awatch" when a watchpoint triggered
	WatchAddr uint64
	SWBreak   bool // stop reason swbreak
	HWBreak   bool // stop reason hwbreak
	Exec      string
	Create    bool
}

// isStopReply reports whether a packet is a stop reply rather than the answer to a request.
// No answer to a request the client sends begins with a capital T, S, W or X followed by a hex
// digit pair (memory and register data are lower-case hex; errors begin with E).
func isStopReply(b []byte) bool {
	if len(b) < 3 || !isHex(b[1]) || !isHex(b[2]) {
		return false
	}
	switch b[0] {
	case 'T':
		return len(b) == 3 || b[3] != '=' // not "Text=..." (qOffsets)
	case 'S':
		return len(b) == 3
	case 'W', 'X':
		return true
	}
	return false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// parseStop decodes a stop reply.
func parseStop(b []byte) (stopReply, error) {
	r := stopReply{Kind: b[0]}
	if !isStopReply(b) {
		return r, fmt.Errorf("not a stop reply: %q", b)
	}
	v, _ := strconv.ParseUint(string(b[1:3]), 16, 8)
	rest := b[3:]
	switch r.Kind {
	case 'W', 'X':
		end := bytes.IndexByte(b, ';')
		if end < 0 {
			end = len(b)
		}
		n, err := strconv.ParseUint(string(b[1:end]), 16, 32)
		if err != nil {
			return r, fmt.Errorf("stop reply %q: %w", b, err)
		}
		if r.Kind == 'W' {
			r.Status = int(n)
		} else {
			r.Signal = int(n)
		}
		if end < len(b) {
			if p, ok := strings.CutPrefix(string(b[end+1:]), "process:"); ok {
				pid, err := parseID(p)
				if err != nil {
					return r, fmt.Errorf("stop reply %q: %w", b, err)
				}
				r.Pid = pid
			}
		}
		return r, nil
	case 'S':
		r.Signal = int(v)
		return r, nil
	}
	r.Signal = int(v)
	for _, field := range bytes.Split(rest, []byte{';'}) {
		if len(field) == 0 {
			continue
		}
		k, val, _ := strings.Cut(string(field), ":")
		switch k {
		case "thread":
			id, err := parseThreadID(val)
			if err != nil {
				return r, fmt.Errorf("stop reply %q: %w", b, err)
			}
			r.Thread, r.HasThread = id, true
		case "watch", "rwatch", "awatch":
			a, err := hexUint(val)
			if err != nil {
				return r, fmt.Errorf("stop reply %q: watch address: %w", b, err)
			}
			r.Watch, r.WatchAddr = k, a
		case "swbreak":
			r.SWBreak = true
		case "hwbreak":
			r.HWBreak = true
		case "create":
			r.Create = true
		case "exec":
			path, err := decodeHex([]byte(val))
			if err != nil {
				return r, fmt.Errorf("stop reply %q: exec path: %w", b, err)
			}
			r.Exec = string(path)
		default:
			// An expedited register: its number in hex, then its raw value in hex.
			n, err := strconv.ParseUint(k, 16, 16)
			if err != nil {
				continue // a reason this client does not know (library, core, ...)
			}
			raw, err := decodeHex([]byte(val))
			if err != nil {
				return r, fmt.Errorf("stop reply %q: register %s: %w", b, k, err)
			}
			if r.Regs == nil {
				r.Regs = make(map[int][]byte)
			}
			r.Regs[int(n)] = raw
		}
	}
	return r, nil
}
