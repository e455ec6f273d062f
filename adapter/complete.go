package adapter

import (
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/go-dap"
	"github.com/hpcdap/hpcdap/symbols"
)

// CompletionItem is DAP's, with start and length always sent: go-dap omits a zero start,
// which a client counting columns from 0 would read as "at the cursor".
type CompletionItem struct {
	Label  string `json:"label"`
	Type   string `json:"type,omitempty"`
	Detail string `json:"detail,omitempty"`
	Start  int    `json:"start"`
	Length int    `json:"length"`
}

// CompletionsBody is the completions response's body.
type CompletionsBody struct {
	Targets []CompletionItem `json:"targets"`
}

// onCompletionsRequest offers the debug console the names that may continue the text at the
// cursor: names in scope at the frame (the focus rank's globals without one), or after "."
// and "->" the members of the expression's type. Nothing to offer is an empty list, not an
// error.
func (s *Conn) onCompletionsRequest(req *dap.CompletionsRequest) {
	j := s.currentJob(&req.Request)
	if j == nil {
		return
	}
	a := req.Arguments
	line, cursor, err := s.completionCursor(a.Text, a.Line, a.Column)
	if err != nil {
		s.sendError(&req.Request, errBadArguments, "completions: "+err.Error())
		return
	}
	var p *symbols.Process
	var f *symbols.Frame
	if a.FrameId != 0 {
		fr := s.frame(&req.Request, j, a.FrameId)
		if fr == nil {
			return
		}
		f, p = fr.frame, fr.frame.Process()
	} else if p, _, err = j.GlobalScope(); err != nil {
		p = nil // no rank stopped: nothing to offer
	}
	body := CompletionsBody{Targets: []CompletionItem{}}
	if p != nil {
		ctx, items, err := p.Complete(f, line[:cursor])
		if err == nil {
			start := s.colOut(utf16Len(line[:ctx.Start]) + 1)
			length := utf16Len(ctx.Prefix)
			for _, it := range items {
				body.Targets = append(body.Targets, CompletionItem{Label: it.Name, Type: completionType(it.Kind),
					Detail: it.Type, Start: start, Length: length})
			}
		}
	}
	s.respond(&req.Request, body)
}

// completionCursor returns the line of text the cursor is on and the cursor's byte offset in
// it, from DAP's line (1-based, in the client's convention; 0: the first) and column (UTF-16
// code units, in the client's convention).
func (s *Conn) completionCursor(text string, line, column int) (string, int, error) {
	lines := strings.Split(text, "\n")
	l := 0
	if line != 0 {
		l = s.lineIn(line) - 1
	}
	if l < 0 || l >= len(lines) {
		return "", 0, fmt.Errorf("line %d is outside the text (%d lines)", line, len(lines))
	}
	col := column
	if !s.client.ColumnsStartAt1 {
		col++
	}
	units := col - 1
	ln := lines[l]
	off := 0
	for units > 0 && off < len(ln) {
		r, size := utf8.DecodeRuneInString(ln[off:])
		units -= utf16.RuneLen(r)
		off += size
	}
	if units != 0 || col < 1 {
		return "", 0, fmt.Errorf("column %d is outside the text of line %d (%d UTF-16 units)", column, l+1, utf16Len(ln))
	}
	return ln, off, nil
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// completionType is DAP's CompletionItemType for a kind of name.
func completionType(k symbols.CompletionKind) string {
	switch k {
	case symbols.CompleteFunction:
		return "function"
	case symbols.CompleteField:
		return "field"
	case symbols.CompleteMethod:
		return "method"
	case symbols.CompleteEnumerator:
		return "enum"
	}
	return "variable"
}
