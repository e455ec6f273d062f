package symbols

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// The expression language is the C subset debuggers accept in watch, hover and breakpoint
// conditions, with C++ scope names and Fortran subscripts, components and operators.

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokInt
	tokFloat
	tokChar
	tokString
	tokOp
	tokReg // $name
)

type token struct {
	kind tokKind
	text string
	pos  int
}

// lex splits an expression into tokens. Fortran mode recognises .and., .eq. and friends.
func lex(src string, fortran bool) ([]token, error) {
	var out []token
	ops3 := []string{"<<=", ">>=", "..."}
	ops2 := []string{"->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "::", "+=", "-=", "*=", "/=", "**"}
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '$':
			j := i + 1
			for j < len(src) && (isIdentChar(src[j])) {
				j++
			}
			out = append(out, token{tokReg, src[i+1 : j], i})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(src) && isIdentChar(src[j]) {
				j++
			}
			out = append(out, token{tokIdent, src[i:j], i})
			i = j
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9'):
			j, isFloat := scanNumber(src, i, fortran)
			k := tokInt
			if isFloat {
				k = tokFloat
			}
			out = append(out, token{k, src[i:j], i})
			i = j
		case c == '\'' && !fortran:
			j := i + 1
			for j < len(src) && src[j] != '\'' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("Unmatched single quote.")
			}
			out = append(out, token{tokChar, src[i+1 : j], i})
			i = j + 1
		case c == '"' || (c == '\'' && fortran):
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' && !fortran {
					j++
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("Unterminated string in expression.")
			}
			out = append(out, token{tokString, src[i+1 : j], i})
			i = j + 1
		case fortran && c == '.':
			// .and. .or. .not. .eq. .ne. .lt. .le. .gt. .ge. .true. .false. .eqv. .neqv.
			j := strings.IndexByte(src[i+1:], '.')
			if j > 0 {
				word := strings.ToLower(src[i+1 : i+1+j])
				switch word {
				case "and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge", "true", "false", "eqv", "neqv":
					out = append(out, token{tokOp, "." + word + ".", i})
					i += j + 2
					continue
				}
			}
			out = append(out, token{tokOp, ".", i})
			i++
		default:
			matched := false
			for _, set := range [][]string{ops3, ops2} {
				for _, op := range set {
					if strings.HasPrefix(src[i:], op) {
						text := op
						if fortran && op == "/=" {
							text = "!=" // Fortran's not-equal
						}
						out = append(out, token{tokOp, text, i})
						i += len(op)
						matched = true
						break
					}
				}
				if matched {
					break
				}
			}
			if matched {
				continue
			}
			if strings.ContainsRune("+-*/%<>=!&|^~?:()[],.@", rune(c)) {
				out = append(out, token{tokOp, string(c), i})
				i++
				continue
			}
			return nil, fmt.Errorf("Invalid character '%c' in expression.", c)
		}
	}
	out = append(out, token{tokEOF, "", len(src)})
	return out, nil
}

func isIdentStart(c byte) bool { return c == '_' || unicode.IsLetter(rune(c)) }
func isIdentChar(c byte) bool  { return c == '_' || unicode.IsLetter(rune(c)) || (c >= '0' && c <= '9') }

func scanNumber(s string, i int, fortran bool) (int, bool) {
	j := i
	isFloat := false
	if strings.HasPrefix(s[i:], "0x") || strings.HasPrefix(s[i:], "0X") {
		j += 2
		for j < len(s) && strings.ContainsRune("0123456789abcdefABCDEF", rune(s[j])) {
			j++
		}
	} else {
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		// A '.' starts a fraction unless it begins a Fortran operator (1.and.) or a range.
		if j < len(s) && s[j] == '.' && !(fortran && j+1 < len(s) && unicode.IsLetter(rune(s[j+1])) &&
			!(s[j+1] == 'e' || s[j+1] == 'E' || s[j+1] == 'd' || s[j+1] == 'D')) {
			isFloat = true
			j++
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
		}
		if j < len(s) && (s[j] == 'e' || s[j] == 'E' || (fortran && (s[j] == 'd' || s[j] == 'D'))) {
			k := j + 1
			if k < len(s) && (s[k] == '+' || s[k] == '-') {
				k++
			}
			if k < len(s) && s[k] >= '0' && s[k] <= '9' {
				isFloat = true
				j = k
				for j < len(s) && s[j] >= '0' && s[j] <= '9' {
					j++
				}
			}
		}
	}
	for j < len(s) && strings.ContainsRune("uUlLfF", rune(s[j])) {
		if s[j] == 'f' || s[j] == 'F' {
			if !isFloat && !strings.HasPrefix(s[i:], "0x") {
				isFloat = true
			}
		}
		j++
	}
	if fortran && j < len(s) && s[j] == '_' { // kind suffix 1.0_8
		j++
		for j < len(s) && isIdentChar(s[j]) {
			j++
		}
	}
	return j, isFloat
}

// node is an expression syntax tree node.
type node struct {
	op   string // "ident", "int", "float", "char", "string", "reg", "unary", "binary", "index", "call", "member", "arrow", "cast", "sizeof", "assign", "cond", "range"
	text string
	kids []*node
	typ  *typeName // for casts and sizeof(type)
	pos  int
}

// typeName is a parsed type in a cast: a base name plus pointer levels.
type typeName struct {
	name string
	ptrs int
}

type parser struct {
	toks    []token
	i       int
	fortran bool
	isType  func(string) bool
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}
func (p *parser) isOp(s string) bool { t := p.peek(); return t.kind == tokOp && t.text == s }
func (p *parser) accept(s string) bool {
	if p.isOp(s) {
		p.next()
		return true
	}
	return false
}
func (p *parser) expect(s string) error {
	if !p.accept(s) {
		return p.syntaxErr()
	}
	return nil
}

func (p *parser) syntaxErr() error {
	t := p.peek()
	if t.kind == tokEOF {
		return fmt.Errorf("A syntax error in expression, near `'.")
	}
	return fmt.Errorf("A syntax error in expression, near `%s'.", t.text)
}

// parseExpr parses a whole expression.
func parseExpr(src string, fortran bool, isType func(string) bool) (*node, error) {
	toks, err := lex(src, fortran)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, fortran: fortran, isType: isType}
	n, err := p.comma()
	if err != nil {
		return nil, err
	}
	if p.peek().kind != tokEOF {
		return nil, p.syntaxErr()
	}
	return n, nil
}

func (p *parser) comma() (*node, error) {
	n, err := p.assign()
	if err != nil {
		return nil, err
	}
	for p.isOp(",") {
		t := p.next()
		r, err := p.assign()
		if err != nil {
			return nil, err
		}
		n = &node{op: "binary", text: ",", kids: []*node{n, r}, pos: t.pos}
	}
	return n, nil
}

func (p *parser) assign() (*node, error) {
	l, err := p.cond()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	if t.kind == tokOp && (t.text == "=" || t.text == "+=" || t.text == "-=" || (t.text == "*=") || (!p.fortran && t.text == "/=")) {
		p.next()
		r, err := p.assign()
		if err != nil {
			return nil, err
		}
		return &node{op: "assign", text: t.text, kids: []*node{l, r}, pos: t.pos}, nil
	}
	return l, nil
}

func (p *parser) cond() (*node, error) {
	c, err := p.binary(0)
	if err != nil {
		return nil, err
	}
	if p.isOp("?") {
		t := p.next()
		a, err := p.comma()
		if err != nil {
			return nil, err
		}
		if err := p.expect(":"); err != nil {
			return nil, err
		}
		b, err := p.cond()
		if err != nil {
			return nil, err
		}
		return &node{op: "cond", kids: []*node{c, a, b}, pos: t.pos}, nil
	}
	return c, nil
}

// binary precedence levels, lowest first.
var binLevels = [][]string{
	{"||", ".or.", ".eqv.", ".neqv."},
	{"&&", ".and."},
	{"|"},
	{"^"},
	{"&"},
	{"==", "!=", ".eq.", ".ne."},
	{"<", ">", "<=", ">=", ".lt.", ".gt.", ".le.", ".ge."},
	{"<<", ">>"},
	{"@"},
	{"+", "-"},
	{"*", "/", "%"},
}

func (p *parser) binary(level int) (*node, error) {
	if level == len(binLevels) {
		return p.power()
	}
	l, err := p.binary(level + 1)
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if t.kind != tokOp || !contains(binLevels[level], t.text) || (p.fortran && t.text == "%") {
			return l, nil
		}
		p.next()
		r, err := p.binary(level + 1)
		if err != nil {
			return nil, err
		}
		l = &node{op: "binary", text: normOp(t.text), kids: []*node{l, r}, pos: t.pos}
	}
}

// power parses Fortran's right-associative "**".
func (p *parser) power() (*node, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	if p.fortran && p.isOp("**") {
		t := p.next()
		r, err := p.power()
		if err != nil {
			return nil, err
		}
		return &node{op: "binary", text: "**", kids: []*node{l, r}, pos: t.pos}, nil
	}
	return l, nil
}

func normOp(s string) string {
	switch s {
	case ".or.", ".neqv.":
		if s == ".neqv." {
			return "!="
		}
		return "||"
	case ".and.":
		return "&&"
	case ".eq.", ".eqv.":
		return "=="
	case ".ne.":
		return "!="
	case ".lt.":
		return "<"
	case ".gt.":
		return ">"
	case ".le.":
		return "<="
	case ".ge.":
		return ">="
	case ".not.":
		return "!"
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) unary() (*node, error) {
	t := p.peek()
	if t.kind == tokOp {
		switch t.text {
		case "-", "+", "!", "~", "*", "&", ".not.":
			p.next()
			x, err := p.unary()
			if err != nil {
				return nil, err
			}
			return &node{op: "unary", text: normOp(t.text), kids: []*node{x}, pos: t.pos}, nil
		case "++", "--":
			return nil, fmt.Errorf("increment and decrement operators are not supported")
		case "(":
			// A cast "(type) expr" when the parenthesis holds a type name.
			if tn, ok := p.tryTypeName(); ok {
				x, err := p.unary()
				if err != nil {
					return nil, err
				}
				return &node{op: "cast", typ: tn, kids: []*node{x}, pos: t.pos}, nil
			}
		}
	}
	if t.kind == tokIdent && t.text == "sizeof" && !p.fortran {
		p.next()
		save := p.i
		if p.isOp("(") {
			if tn, ok := p.tryTypeName(); ok {
				return &node{op: "sizeof", typ: tn, pos: t.pos}, nil
			}
			p.i = save
		}
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &node{op: "sizeof", kids: []*node{x}, pos: t.pos}, nil
	}
	return p.postfix()
}

// tryTypeName parses "(type-name)" if the tokens after "(" form one; otherwise it consumes
// nothing.
func (p *parser) tryTypeName() (*typeName, bool) {
	save := p.i
	if !p.accept("(") {
		return nil, false
	}
	var words []string
	for p.peek().kind == tokIdent {
		w := p.peek().text
		if len(words) > 0 && !isTypeWord(w) && !isTypeWord(words[len(words)-1]) &&
			words[len(words)-1] != "struct" && words[len(words)-1] != "union" && words[len(words)-1] != "enum" {
			break
		}
		words = append(words, w)
		p.next()
		for p.isOp("::") {
			p.next()
			if p.peek().kind != tokIdent {
				p.i = save
				return nil, false
			}
			words[len(words)-1] += "::" + p.next().text
		}
	}
	if len(words) == 0 {
		p.i = save
		return nil, false
	}
	name := strings.Join(words, " ")
	if !isTypeWord(words[0]) && words[0] != "struct" && words[0] != "union" && words[0] != "enum" &&
		(p.isType == nil || !p.isType(name)) {
		p.i = save
		return nil, false
	}
	tn := &typeName{name: name}
	for p.accept("*") {
		tn.ptrs++
	}
	if !p.accept(")") {
		p.i = save
		return nil, false
	}
	return tn, true
}

func isTypeWord(w string) bool {
	switch w {
	case "int", "char", "short", "long", "unsigned", "signed", "float", "double", "void", "_Bool", "bool",
		"const", "volatile":
		return true
	}
	return false
}

func (p *parser) postfix() (*node, error) {
	n, err := p.primary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		switch {
		case t.kind == tokOp && t.text == "[":
			p.next()
			i, err := p.comma()
			if err != nil {
				return nil, err
			}
			if err := p.expect("]"); err != nil {
				return nil, err
			}
			n = &node{op: "index", kids: []*node{n, i}, pos: t.pos}
		case t.kind == tokOp && t.text == "(":
			p.next()
			kids := []*node{n}
			for !p.isOp(")") {
				var a *node
				var err error
				if p.fortran {
					a, err = p.rangeArg()
				} else {
					a, err = p.assign()
				}
				if err != nil {
					return nil, err
				}
				kids = append(kids, a)
				if !p.accept(",") {
					break
				}
			}
			if err := p.expect(")"); err != nil {
				return nil, err
			}
			n = &node{op: "call", kids: kids, pos: t.pos}
		case t.kind == tokOp && (t.text == "." || (t.text == "%" && p.fortran)):
			p.next()
			id := p.next()
			if id.kind != tokIdent {
				return nil, p.syntaxErr()
			}
			n = &node{op: "member", text: id.text, kids: []*node{n}, pos: t.pos}
		case t.kind == tokOp && t.text == "->":
			p.next()
			id := p.next()
			if id.kind != tokIdent {
				return nil, p.syntaxErr()
			}
			n = &node{op: "arrow", text: id.text, kids: []*node{n}, pos: t.pos}
		default:
			return n, nil
		}
	}
}

// rangeArg parses a Fortran subscript or section "i", "lo:hi", ":".
func (p *parser) rangeArg() (*node, error) {
	var lo, hi *node
	var err error
	if !p.isOp(":") {
		lo, err = p.assign()
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return lo, nil
		}
	}
	t := p.next() // ':'
	if !p.isOp(",") && !p.isOp(")") {
		hi, err = p.assign()
		if err != nil {
			return nil, err
		}
	}
	return &node{op: "range", kids: []*node{lo, hi}, pos: t.pos}, nil
}

func (p *parser) primary() (*node, error) {
	save := p.i
	t := p.next()
	switch t.kind {
	case tokIdent:
		name := t.text
		for p.isOp("::") {
			p.next()
			id := p.next()
			if id.kind != tokIdent {
				return nil, p.syntaxErr()
			}
			name += "::" + id.text
		}
		return &node{op: "ident", text: name, pos: t.pos}, nil
	case tokInt:
		return &node{op: "int", text: t.text, pos: t.pos}, nil
	case tokFloat:
		return &node{op: "float", text: t.text, pos: t.pos}, nil
	case tokChar:
		return &node{op: "char", text: t.text, pos: t.pos}, nil
	case tokString:
		return &node{op: "string", text: t.text, pos: t.pos}, nil
	case tokReg:
		return &node{op: "reg", text: t.text, pos: t.pos}, nil
	case tokOp:
		switch t.text {
		case "(":
			n, err := p.comma()
			if err != nil {
				return nil, err
			}
			if err := p.expect(")"); err != nil {
				return nil, err
			}
			return n, nil
		case ".true.", ".false.":
			return &node{op: "bool", text: t.text, pos: t.pos}, nil
		case "::":
			id := p.next()
			if id.kind != tokIdent {
				return nil, p.syntaxErr()
			}
			return &node{op: "ident", text: id.text, pos: t.pos}, nil
		}
	}
	p.i = save
	return nil, p.syntaxErr()
}

// parseCharLit decodes a C character literal body ("a", "\n", "\012").
func parseCharLit(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("Empty character constant.")
	}
	v, _, tail, err := strconv.UnquoteChar(s, '\'')
	if err != nil || tail != "" {
		return 0, fmt.Errorf("Invalid character constant.")
	}
	return int64(v), nil
}
