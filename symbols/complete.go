package symbols

import (
	"sort"
	"strings"
)

// CompletionKind says what a completion names.
type CompletionKind int

// Completion kinds.
const (
	CompleteVariable CompletionKind = iota // a local, parameter or static variable
	CompleteFunction
	CompleteField  // a member of a struct, union or class
	CompleteMethod // a member function of a C++ class
	CompleteEnumerator
)

// Completion is one name an expression being typed may continue with.
type Completion struct {
	Name string
	Kind CompletionKind
	Type string // the variable's or member's type, when known
}

// CompletionContext is what Complete found at the end of the text: the partial name being
// typed, where it starts in the text (a byte offset), and the expression whose members are
// offered when the name follows "." or "->" (empty otherwise).
type CompletionContext struct {
	Prefix string
	Start  int
	Base   string
	// Member is set after "." or "->"; with no Base (a number such as "1.", an operator
	// with nothing before it) nothing completes.
	Member bool
}

// ParseCompletion finds the partial identifier at the end of text and, when it follows "."
// or "->", the expression before the operator.
func ParseCompletion(text string) CompletionContext {
	i := len(text)
	for i > 0 && isIdentByte(text[i-1]) {
		i--
	}
	c := CompletionContext{Prefix: text[i:], Start: i}
	op := 0
	switch {
	case strings.HasSuffix(text[:i], "->"):
		op = 2
	case strings.HasSuffix(text[:i], "."):
		op = 1
	default:
		return c
	}
	c.Member = true
	end := i - op
	start := baseStart(text, end)
	c.Base = strings.TrimSpace(text[start:end])
	if c.Base == "" || (op == 1 && isNumber(c.Base)) {
		c.Base = "" // "1." is a number being typed, not a member access
	}
	return c
}

// baseStart walks back from end over the operand of a postfix "." or "->": identifiers,
// member accesses, and balanced brackets and parentheses (subscripts, calls, a parenthesised
// expression).
func baseStart(text string, end int) int {
	i := end
	for i > 0 && text[i-1] == ' ' {
		i--
	}
	for i > 0 {
		c := text[i-1]
		switch {
		case isIdentByte(c) || c == '.':
			i--
		case c == '>' && i > 1 && text[i-2] == '-':
			i -= 2
		case c == ':' && i > 1 && text[i-2] == ':':
			i -= 2
		case c == ']' || c == ')':
			open := byte('[')
			if c == ')' {
				open = '('
			}
			depth := 0
			j := i - 1
			for ; j >= 0; j-- {
				if text[j] == c {
					depth++
				} else if text[j] == open {
					depth--
					if depth == 0 {
						break
					}
				}
			}
			if j < 0 {
				return i
			}
			i = j
		default:
			return i
		}
	}
	return i
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

func isNumber(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }

// Complete returns the completions of the text at the frame (f nil: outside any frame, at
// the program's globals in process p), sorted by name, with the context they complete.
// After "." or "->" they are the members of the base expression's type (through pointers,
// references and typedefs); otherwise the names visible at the frame: locals and parameters,
// the statics and globals of the frame's module, its functions and enumerators. Only names
// that begin with the partial name are returned. The base expression is evaluated without
// calling functions.
func (p *Process) Complete(f *Frame, text string) (CompletionContext, []Completion, error) {
	c := ParseCompletion(text)
	var out []Completion
	if c.Member && c.Base == "" {
		return c, nil, nil
	}
	if c.Base != "" {
		var v *Value
		var err error
		if f != nil {
			v, err = f.Eval(c.Base)
		} else {
			v, err = p.Eval(c.Base)
		}
		if err != nil {
			return c, nil, err
		}
		mod := p.Executable()
		if f != nil && f.Module != nil {
			mod = f.Module
		}
		out = members(mod, v.Type, c.Prefix)
	} else {
		out = p.namesInScope(f, c.Prefix)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return c, out, nil
}

// members lists the members of a struct, union or class type named with prefix, through
// pointers, references and typedefs, with base classes' and anonymous members' members, and a
// C++ class's member functions.
func members(mod *Module, t *Type, prefix string) []Completion {
	t = t.Strip()
	if t != nil && (t.Kind == KindPointer || t.Kind == KindRef || t.Kind == KindRvalueRef) {
		t = t.Elem.Strip()
	}
	var out []Completion
	seen := map[string]bool{}
	var walk func(t *Type, depth int)
	walk = func(t *Type, depth int) {
		t = t.Strip()
		if t == nil || depth > 16 || (t.Kind != KindStruct && t.Kind != KindUnion) {
			return
		}
		if t.Incomplete && t.Name != "" && mod != nil && mod.Bin != nil {
			if full, err := mod.Bin.LookupType(t.Name); err == nil && !full.Incomplete {
				t = full
			}
		}
		for _, fl := range t.Fields {
			if fl.Base || (fl.Name == "" && fl.Type != nil) {
				walk(fl.Type, depth+1)
				continue
			}
			if seen[fl.Name] || !strings.HasPrefix(fl.Name, prefix) {
				continue
			}
			seen[fl.Name] = true
			ty := ""
			if fl.Type != nil {
				ty = fl.Type.String()
			}
			out = append(out, Completion{Name: fl.Name, Kind: CompleteField, Type: ty})
		}
		if t.Lang == LangCPlusPlus && t.Name != "" && mod != nil && mod.Bin != nil {
			for _, name := range methods(mod.Bin, t.Name) {
				if !seen[name] && strings.HasPrefix(name, prefix) {
					seen[name] = true
					out = append(out, Completion{Name: name, Kind: CompleteMethod})
				}
			}
		}
	}
	walk(t, 0)
	return out
}

// methods returns the names of the member functions of the C++ class named class (qualified)
// that the binary has code for, constructors left out.
func methods(b *Binary, class string) []string {
	var out []string
	ctor := class
	if i := strings.LastIndex(class, "::"); i >= 0 {
		ctor = class[i+2:]
	}
	for _, fn := range b.Functions() {
		name, ok := strings.CutPrefix(fn.Name, class+"::")
		if !ok || name == "" || strings.Contains(name, "::") || name == ctor {
			continue
		}
		if i := strings.IndexByte(name, '('); i >= 0 {
			name = name[:i]
		}
		out = append(out, name)
	}
	return out
}

// namesInScope lists the names visible at f (outside a frame, the executable's) that begin
// with prefix, each once: the nearest declaration wins, as a lookup would find it.
func (p *Process) namesInScope(f *Frame, prefix string) []Completion {
	var out []Completion
	seen := map[string]bool{}
	add := func(name string, k CompletionKind, ty string) {
		if name == "" || seen[name] || !strings.HasPrefix(name, prefix) {
			return
		}
		seen[name] = true
		out = append(out, Completion{Name: name, Kind: k, Type: ty})
	}
	var cu *compUnit
	mod := p.Executable()
	if f != nil {
		if f.Function != nil {
			cu = f.Function.cu
		}
		if f.Module != nil {
			mod = f.Module
		}
		locals, _ := f.Locals()
		args, _ := f.Args()
		for _, v := range append(locals, args...) {
			if v.Artificial {
				continue
			}
			add(v.Name, CompleteVariable, declType(v))
		}
	}
	if mod == nil || mod.Bin == nil || mod.Bin.dw == nil {
		return out
	}
	b := mod.Bin
	visible := func(r dieRef) bool { return r.ext || cu == nil || r.cu == cu }
	var globals []string
	for name, refs := range b.globals {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, r := range refs {
			if visible(r) {
				globals = append(globals, name)
				break
			}
		}
	}
	sort.Strings(globals)
	for _, name := range globals {
		add(name, CompleteVariable, "")
	}
	var enums []string
	for name, refs := range b.enumerators {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, r := range refs {
			if cu == nil || r.cu == cu {
				enums = append(enums, name)
				break
			}
		}
	}
	sort.Strings(enums)
	for _, name := range enums {
		add(name, CompleteEnumerator, "")
	}
	for _, fn := range b.Functions() {
		if strings.HasPrefix(fn.Name, prefix) && (cu == nil || fn.cu == cu || b.funcExternal(fn)) {
			add(fn.Name, CompleteFunction, "")
		}
	}
	return out
}

// declType is the type of a frame's variable (its value is not read).
func declType(v *Variable) string {
	if val := v.Value(); val != nil && val.Type != nil && val.err == nil {
		return val.Type.String()
	}
	return ""
}
