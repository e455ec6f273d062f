package adapter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/debugger"
	"github.com/hpcdap/hpcdap/symbols"
)

func (s *Conn) onExceptionInfoRequest(req *dap.ExceptionInfoRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	t := s.stoppedThread(&req.Request, j, req.Arguments.ThreadId)
	if t == nil {
		return
	}
	r := t.Rank
	n := j.StopSignal(r)
	if n == nil {
		s.sendError(&req.Request, errExceptionInfo, fmt.Sprintf("exceptionInfo: rank %d did not stop for a signal", r.Num))
		return
	}
	sig := int(n.Signal)
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	desc := fmt.Sprintf("%s (%s) on rank %d%s, thread LWP %d, at pc %#x", debugger.SignalName(sig), debugger.SignalDescription(sig),
		r.Num, r.Where(), n.ThreadID, n.InstAddress)
	addr, known := n.DataAddress, n.DataAddress != 0
	if !known && (sig == 11 || sig == 7) {
		addr, known = debugger.FaultAddress(ctx, r, int(n.ThreadID))
	}
	if known && (sig == 11 || sig == 7) {
		desc += fmt.Sprintf(": invalid access to address %#x", addr)
	}
	resp := &dap.ExceptionInfoResponse{Response: newResponse(&req.Request)}
	resp.Body.ExceptionId = debugger.SignalName(sig)
	resp.Body.Description = desc
	resp.Body.BreakMode = "always"
	details := &dap.ExceptionDetails{Message: desc, TypeName: "signal", FullTypeName: debugger.SignalName(sig)}
	if ts, err := r.Stack(ctx, int(n.ThreadID)); err == nil {
		var b []byte
		for _, f := range ts.Frames {
			line := fmt.Sprintf("#%d %#x in %s", f.Level, f.PC, debugger.FrameName(f))
			if f.HasLine {
				line += fmt.Sprintf(" at %s:%d", f.Line.File, f.Line.Line)
			}
			b = append(b, line+"\n"...)
		}
		details.StackTrace = string(b)
	}
	resp.Body.Details = details
	s.send(resp)
}

// viewModules returns the modules of the rank the client looks at, or answers r with an error
// (ok false).
func (s *Conn) viewModules(r *dap.Request) (mods []*symbols.Module, ok bool) {
	j := s.currentJob(r)
	if j == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(s.ctx, debugger.DefaultTimeout)
	defer cancel()
	mods, err := j.ViewModules(ctx)
	if err != nil {
		s.sendError(r, errInternal, r.Command+": "+err.Error())
		return nil, false
	}
	return mods, true
}

func (s *Conn) onModulesRequest(req *dap.ModulesRequest) {
	mods, ok := s.viewModules(&req.Request)
	if !ok {
		return
	}
	out := []dap.Module{}
	for _, m := range mods {
		dm := dap.Module{Id: m.Path, Name: filepath.Base(m.Path), Path: m.Path,
			AddressRange: fmt.Sprintf("%#x-%#x", m.Lo, m.Hi)}
		if m.Bin.HasDWARF() {
			dm.SymbolStatus = "Symbols loaded."
			dm.SymbolFilePath = m.Bin.Path
			if m.Bin.DebugPath != "" {
				dm.SymbolFilePath = m.Bin.DebugPath
			}
		} else {
			dm.SymbolStatus = "No debugging information."
		}
		if id := m.Bin.BuildIDString(); id != "" {
			dm.Version = "build-id " + id
		}
		dm.IsUserCode = m.Bin.HasDWARF()
		out = append(out, dm)
	}
	start := min(max(req.Arguments.StartModule, 0), len(out))
	end := len(out)
	if req.Arguments.ModuleCount > 0 && start+req.Arguments.ModuleCount < end {
		end = start + req.Arguments.ModuleCount
	}
	resp := &dap.ModulesResponse{Response: newResponse(&req.Request)}
	resp.Body.Modules = out[start:end]
	resp.Body.TotalModules = len(out)
	s.send(resp)
}

func (s *Conn) onLoadedSourcesRequest(req *dap.LoadedSourcesRequest) {
	mods, ok := s.viewModules(&req.Request)
	if !ok {
		return
	}
	seen := map[string]bool{}
	var paths []string
	for _, m := range mods {
		for _, f := range m.Bin.SourceFiles() {
			if !seen[f] && len(paths) < 20000 {
				seen[f] = true
				paths = append(paths, f)
			}
		}
	}
	sort.Strings(paths)
	resp := &dap.LoadedSourcesResponse{Response: newResponse(&req.Request)}
	resp.Body.Sources = []dap.Source{}
	for _, p := range paths {
		resp.Body.Sources = append(resp.Body.Sources, *s.sources.source(p))
	}
	s.send(resp)
}

// maxSourceSize bounds the source request's answer.
const maxSourceSize = 2 << 20

func (s *Conn) onSourceRequest(req *dap.SourceRequest) {
	path := ""
	if req.Arguments.Source != nil {
		path = req.Arguments.Source.Path
	}
	if path == "" {
		s.sendError(&req.Request, errSource, "source: this adapter hands out no source references; open the file by path")
		return
	}
	st, err := os.Stat(path)
	if err != nil {
		s.sendError(&req.Request, errSource, fmt.Sprintf("source %s: %v", path, err))
		return
	}
	if st.Size() > maxSourceSize {
		s.sendError(&req.Request, errSource, fmt.Sprintf("source %s: %d bytes is too large", path, st.Size()))
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		s.sendError(&req.Request, errSource, fmt.Sprintf("source %s: %v", path, err))
		return
	}
	resp := &dap.SourceResponse{Response: newResponse(&req.Request)}
	resp.Body.Content = string(b)
	s.send(resp)
}
