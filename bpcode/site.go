package bpcode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// HitOp is how a hit condition compares the count of hits whose condition held.
type HitOp byte

// The hit conditions, as DAP's hitCondition spells them.
const (
	HitAny HitOp = iota // every hit counts (no hit condition)
	HitGE               // ">= n" or "n": from the nth hit on
	HitGT               // "> n"
	HitEQ               // "== n"
	HitLT               // "< n"
	HitLE               // "<= n"
	HitMod              // "% n": every nth hit
	hitOpCount
)

// Holds reports whether the hits-th hit satisfies the hit condition op n.
func (op HitOp) Holds(hits, n uint64) bool {
	switch op {
	case HitGE:
		return hits >= n
	case HitGT:
		return hits > n
	case HitEQ:
		return hits == n
	case HitLT:
		return hits < n
	case HitLE:
		return hits <= n
	case HitMod:
		return n != 0 && hits%n == 0
	}
	return true
}

// Format is how a log point shows a value.
type Format byte

// The formats, as the front end prints values of these kinds.
const (
	FmtText     Format = iota // no value: the part is text only
	FmtSigned                 // decimal of a signed integer
	FmtUnsigned               // decimal of an unsigned integer
	FmtChar                   // a char: its number and the quoted character (65 'A')
	FmtBool                   // true or false (another number in decimal)
	FmtFloat                  // a float64, shortest form
	FmtFloat32                // a float64 that came from a float: shortest form of the float
	FmtPointer                // hexadecimal 0x...
	fmtCount
)

// Valued reports whether f is a format of a value (not FmtText, nor one this package does not
// know).
func (f Format) Valued() bool { return f != FmtText && f < fmtCount }

// LogPart is text followed, unless its Format is FmtText, by the value of a program.
type LogPart struct {
	Text   string
	Format Format
	Expr   *Program
}

// Site is what the agent decides at one breakpoint address.
type Site struct {
	Cond  *Program // nil: every hit holds
	HitOp HitOp
	HitN  uint64
	Log   []LogPart // non-empty: a log point, which prints and never stops
}

// Limits of a site.
const (
	MaxLogParts = 32
	MaxText     = 1024 // bytes of one part's text
	MaxSite     = 16384
)

// Encode returns the site's wire form: hit op u8, flags u8 (bit 0: a condition follows,
// bit 1: a log point), part count u16, hit n u64, then the condition as u16 length and
// program, then each log part as format u8, text length u16, text, and (a value part) u16
// length and program. Integers little-endian.
func (s *Site) Encode() []byte {
	b := []byte{byte(s.HitOp), 0}
	if s.Cond != nil {
		b[1] |= 1
	}
	if len(s.Log) > 0 {
		b[1] |= 2
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s.Log)))
	b = binary.LittleEndian.AppendUint64(b, s.HitN)
	prog := func(p *Program) {
		e := p.Encode()
		b = binary.LittleEndian.AppendUint16(b, uint16(len(e)))
		b = append(b, e...)
	}
	if s.Cond != nil {
		prog(s.Cond)
	}
	for _, p := range s.Log {
		b = append(b, byte(p.Format))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(p.Text)))
		b = append(b, p.Text...)
		if p.Format != FmtText {
			prog(p.Expr)
		}
	}
	return b
}

var errShort = errors.New("bpcode: site: truncated")

// DecodeSite reads and checks a site.
func DecodeSite(b []byte) (*Site, error) {
	if len(b) > MaxSite {
		return nil, fmt.Errorf("bpcode: site: %d bytes, at most %d", len(b), MaxSite)
	}
	if len(b) < 12 {
		return nil, errShort
	}
	s := &Site{HitOp: HitOp(b[0]), HitN: binary.LittleEndian.Uint64(b[4:])}
	flags, nparts := b[1], int(binary.LittleEndian.Uint16(b[2:]))
	if s.HitOp >= hitOpCount {
		return nil, fmt.Errorf("bpcode: site: hit condition %d", b[0])
	}
	if s.HitOp == HitMod && s.HitN == 0 {
		return nil, errors.New("bpcode: site: hit condition % 0")
	}
	if flags&^3 != 0 {
		return nil, fmt.Errorf("bpcode: site: unknown flags %#x", flags)
	}
	if (flags&2 != 0) != (nparts > 0) || nparts > MaxLogParts {
		return nil, fmt.Errorf("bpcode: site: %d log parts", nparts)
	}
	b = b[12:]
	prog := func() (*Program, error) {
		if len(b) < 2 {
			return nil, errShort
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return nil, errShort
		}
		p, err := Decode(b[2 : 2+n])
		b = b[2+n:]
		return p, err
	}
	if flags&1 != 0 {
		p, err := prog()
		if err != nil {
			return nil, err
		}
		s.Cond = p
	}
	for range nparts {
		if len(b) < 3 {
			return nil, errShort
		}
		f, n := Format(b[0]), int(binary.LittleEndian.Uint16(b[1:]))
		if f >= fmtCount {
			return nil, fmt.Errorf("bpcode: site: log format %d", f)
		}
		if n > MaxText || len(b) < 3+n {
			return nil, errShort
		}
		part := LogPart{Format: f, Text: string(b[3 : 3+n])}
		b = b[3+n:]
		if f != FmtText {
			p, err := prog()
			if err != nil {
				return nil, err
			}
			part.Expr = p
		}
		s.Log = append(s.Log, part)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("bpcode: site: %d bytes after the end", len(b))
	}
	return s, nil
}

// Condition evaluates the site's condition: whether the hit holds (true without one).
func (s *Site) Condition(m Machine, bias uint64) (bool, error) {
	if s.Cond == nil {
		return true, nil
	}
	v, err := s.Cond.Eval(m, bias)
	return v != 0, err
}

// Message formats the log message of a hit; a value that cannot be read shows as <error>,
// and the message ends with a newline.
func (s *Site) Message(m Machine, bias uint64) string {
	var sb strings.Builder
	for _, p := range s.Log {
		sb.WriteString(p.Text)
		if p.Format == FmtText {
			continue
		}
		v, err := p.Expr.Eval(m, bias)
		if err != nil {
			sb.WriteString("<" + err.Error() + ">")
			continue
		}
		sb.WriteString(FormatValue(p.Format, v))
	}
	if !strings.HasSuffix(sb.String(), "\n") {
		sb.WriteByte('\n')
	}
	return sb.String()
}

// FormatValue prints a word as format f does.
func FormatValue(f Format, v uint64) string {
	switch f {
	case FmtSigned:
		return strconv.FormatInt(int64(v), 10)
	case FmtUnsigned:
		return strconv.FormatUint(v, 10)
	case FmtChar:
		c := int64(v)
		return strconv.FormatInt(c, 10) + " " + charLit(byte(c))
	case FmtBool:
		switch v {
		case 0:
			return "false"
		case 1:
			return "true"
		}
		return strconv.FormatUint(v, 10) // a C bool holding another number, as the front end prints it
	case FmtFloat:
		return strconv.FormatFloat(math.Float64frombits(v), 'g', -1, 64)
	case FmtFloat32:
		return strconv.FormatFloat(math.Float64frombits(v), 'g', -1, 32)
	case FmtPointer:
		return "0x" + strconv.FormatUint(v, 16)
	}
	return ""
}

// charLit quotes a character as C does, as the front end prints a char (EscapeChar).
func charLit(c byte) string {
	return "'" + EscapeChar(c, '\'', new(bool)) + "'"
}

// EscapeChar renders one byte as gdb's print_wchar does in the C locale: printable ASCII as
// itself (quote and backslash escaped), common controls as \n etc., the rest as 3-digit
// octal; a hex digit right after an octal escape is escaped too (needEscape carries that
// from one byte of a string to the next).
func EscapeChar(c byte, quote byte, needEscape *bool) string {
	esc := *needEscape
	*needEscape = false
	switch c {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\v':
		return `\v`
	}
	isHex := (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
	if c >= 0x20 && c < 0x7f && !(esc && isHex) {
		if c == quote || c == '\\' {
			return `\` + string(rune(c))
		}
		return string(rune(c))
	}
	*needEscape = true
	return fmt.Sprintf(`\%03o`, c)
}
