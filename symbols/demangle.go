package symbols

import (
	"strconv"
	"strings"
)

// demangle decodes an Itanium C++ ABI symbol name ("_ZTVN3geo6CircleE" → "vtable for
// geo::Circle", "_ZNK3geo6Circle4areaEv" → "geo::Circle::area() const") in the style of
// c++filt, which is how gdb shows minimal symbols. Names it cannot decode are returned
// unchanged.
func demangle(s string) string {
	if !strings.HasPrefix(s, "_Z") {
		return s
	}
	d := &demangler{s: s, i: 2}
	out, ok := d.encoding()
	if !ok || d.i != len(d.s) {
		if ok && d.i < len(d.s) && d.s[d.i] == '.' {
			// Clone suffixes (".cold", ".isra.0") are shown in brackets.
			return out + " [clone " + d.s[d.i:] + "]"
		}
		return s
	}
	return out
}

type demangler struct {
	s        string
	i        int
	subs     []string // substitution candidates
	targs    []string // template arguments of the function being decoded (for T_)
	lastArgs []string // the template arguments just decoded
	depth    int
	// special is set when the last unqualified name was a constructor, destructor or
	// conversion operator (template instances of those encode no return type).
	special bool
	// template is set when the name just decoded ends with template arguments.
	template bool
}

func (d *demangler) peek() byte {
	if d.i < len(d.s) {
		return d.s[d.i]
	}
	return 0
}

func (d *demangler) eat(p string) bool {
	if strings.HasPrefix(d.s[d.i:], p) {
		d.i += len(p)
		return true
	}
	return false
}

func (d *demangler) encoding() (string, bool) {
	if d.eat("Th") {
		d.eat("n")
		d.number()
		if !d.eat("_") {
			return "", false
		}
		e, ok := d.encoding()
		return "non-virtual thunk to " + e, ok
	}
	if d.eat("Tv") {
		for k := 0; k < 2; k++ {
			d.eat("n")
			d.number()
			if !d.eat("_") {
				return "", false
			}
		}
		e, ok := d.encoding()
		return "virtual thunk to " + e, ok
	}
	if d.eat("TW") {
		n, ok := d.name()
		return "TLS wrapper function for " + n, ok
	}
	if d.eat("TH") {
		n, ok := d.name()
		return "TLS init function for " + n, ok
	}
	if d.eat("TC") {
		derived, ok := d.typ()
		if !ok {
			return "", false
		}
		d.number()
		if !d.eat("_") {
			return "", false
		}
		base, ok := d.typ()
		return "construction vtable for " + base + "-in-" + derived, ok
	}
	if d.eat("T") {
		var kind string
		switch {
		case d.eat("V"):
			kind = "vtable for "
		case d.eat("I"):
			kind = "typeinfo for "
		case d.eat("S"):
			kind = "typeinfo name for "
		case d.eat("T"):
			kind = "VTT for "
		default:
			return "", false
		}
		t, ok := d.typ()
		return kind + t, ok
	}
	if d.eat("GTt") {
		e, ok := d.encoding()
		return "transaction clone for " + e, ok
	}
	if d.eat("GV") {
		n, ok := d.name()
		return "guard variable for " + n, ok
	}
	name, cv, ok := d.nameCV()
	if !ok {
		return "", false
	}
	if d.i >= len(d.s) || d.peek() == '.' {
		return name, true
	}
	// A template function's mangling starts with its return type.
	ret := ""
	if d.template && !d.special {
		r, ok := d.typ()
		if !ok {
			return "", false
		}
		ret = r + " "
	}
	params, ok := d.params()
	if !ok {
		return "", false
	}
	return ret + name + "(" + params + ")" + cv, true
}

func (d *demangler) params() (string, bool) {
	var ps []string
	for d.i < len(d.s) && d.peek() != 'E' && d.peek() != '.' {
		t, ok := d.typ()
		if !ok {
			return "", false
		}
		ps = append(ps, t)
	}
	if len(ps) == 1 && ps[0] == "void" {
		return "", true
	}
	return strings.Join(ps, ", "), true
}

func (d *demangler) name() (string, bool) {
	n, _, ok := d.nameCV()
	return n, ok
}

// nameCV decodes a name and returns the member function's cv-qualifiers (" const").
func (d *demangler) nameCV() (string, string, bool) {
	d.depth++
	defer func() { d.depth-- }()
	if d.depth > 64 {
		return "", "", false
	}
	switch {
	case d.eat("N"):
		cv := ""
		for {
			switch {
			case d.eat("K"):
				cv += " const"
				continue
			case d.eat("V"):
				cv += " volatile"
				continue
			case d.eat("r"):
				continue
			case d.eat("R"):
				cv += " &"
				continue
			case d.eat("O"):
				cv += " &&"
				continue
			}
			break
		}
		var parts []string
		prefix := ""
		lastSpecial, lastTemplate := false, false
		defer func() { d.special, d.template = lastSpecial, lastTemplate }()
		for !d.eat("E") {
			if d.i >= len(d.s) {
				return "", "", false
			}
			if d.peek() == 'I' {
				args, ok := d.templateArgs()
				if !ok || len(parts) == 0 {
					return "", "", false
				}
				if strings.HasSuffix(parts[len(parts)-1], "<") {
					parts[len(parts)-1] += " " // "operator<< <T>"
				}
				parts[len(parts)-1] += args
				lastTemplate = true
				if d.depth == 1 {
					d.targs = d.lastArgs
				}
				prefix = strings.Join(parts, "::")
				if d.peek() != 'E' {
					d.subs = append(d.subs, prefix)
				}
				continue
			}
			if d.peek() == 'S' && len(parts) == 0 {
				sub, ok := d.substitution()
				if !ok {
					return "", "", false
				}
				parts = append(parts, sub)
				prefix = sub
				continue
			}
			u, ok := d.unqualified(parts)
			if !ok {
				return "", "", false
			}
			lastSpecial, lastTemplate = d.special, false
			parts = append(parts, u)
			prefix = strings.Join(parts, "::")
			if d.peek() != 'E' {
				d.subs = append(d.subs, prefix)
			}
		}
		return prefix, cv, true
	case d.eat("Z"):
		// <local-name>: function-local entity.
		fn, ok := d.encodingLocal()
		if !ok || !d.eat("E") {
			return "", "", false
		}
		if d.eat("s") {
			return fn + "::string literal", "", true
		}
		n, cv, ok := d.nameCV()
		return fn + "::" + n, cv, ok
	case d.peek() == 'S' && !strings.HasPrefix(d.s[d.i:], "St"):
		sub, ok := d.substitution()
		if !ok {
			return "", "", false
		}
		if d.peek() == 'I' {
			args, ok := d.templateArgs()
			return sub + args, "", ok
		}
		return sub, "", true
	}
	std := d.eat("St")
	u, ok := d.unqualified(nil)
	if !ok {
		return "", "", false
	}
	d.template = false
	if std {
		u = "std::" + u
	}
	if d.peek() == 'I' {
		d.subs = append(d.subs, u)
		args, ok := d.templateArgs()
		if !ok {
			return "", "", false
		}
		if strings.HasSuffix(u, "<") {
			u += " "
		}
		u += args
		d.template = true
		if d.depth == 1 {
			d.targs = d.lastArgs
		}
	}
	return u, "", true
}

func (d *demangler) encodingLocal() (string, bool) {
	name, cv, ok := d.nameCV()
	if !ok {
		return "", false
	}
	params, ok := d.params()
	if !ok {
		return "", false
	}
	return name + "(" + params + ")" + cv, true
}

func (d *demangler) unqualified(parts []string) (string, bool) {
	n, ok := d.unqualified1(parts)
	// ABI tags: "B5cxx11" → "[abi:cxx11]".
	for ok && d.peek() == 'B' {
		d.i++
		tag, ok2 := d.sourceName()
		if !ok2 {
			return "", false
		}
		n += "[abi:" + tag + "]"
	}
	return n, ok
}

func (d *demangler) unqualified1(parts []string) (string, bool) {
	d.special = false
	c := d.peek()
	switch {
	case c >= '0' && c <= '9':
		return d.sourceName()
	case c == 'C' && d.i+1 < len(d.s) && d.s[d.i+1] >= '1' && d.s[d.i+1] <= '5':
		d.i += 2
		d.special = true
		if len(parts) == 0 {
			return "", false
		}
		return stripTemplateArgs(unqualified(parts[len(parts)-1])), true
	case c == 'D' && d.i+1 < len(d.s) && d.s[d.i+1] >= '0' && d.s[d.i+1] <= '5':
		d.i += 2
		d.special = true
		if len(parts) == 0 {
			return "", false
		}
		return "~" + stripTemplateArgs(unqualified(parts[len(parts)-1])), true
	case c >= 'a' && c <= 'z':
		if op, ok := operatorNames[d.s[d.i:min(d.i+2, len(d.s))]]; ok {
			d.i += 2
			return "operator" + op, true
		}
		if d.eat("cv") {
			t, ok := d.typ()
			d.special = true
			return "operator " + t, ok
		}
	case c == 'U' && d.eat("Ut"):
		n := d.number()
		d.eat("_")
		return "{unnamed type#" + strconv.Itoa(n+2) + "}", true
	}
	return "", false
}

func stripTemplateArgs(s string) string {
	if i := strings.IndexAny(s, "<["); i > 0 {
		return s[:i]
	}
	return s
}

var operatorNames = map[string]string{
	"nw": " new", "na": " new[]", "dl": " delete", "da": " delete[]", "ps": "+", "ng": "-", "ad": "&",
	"de": "*", "co": "~", "pl": "+", "mi": "-", "ml": "*", "dv": "/", "rm": "%", "an": "&", "or": "|",
	"eo": "^", "aS": "=", "pL": "+=", "mI": "-=", "mL": "*=", "dV": "/=", "rM": "%=", "aN": "&=",
	"oR": "|=", "eO": "^=", "ls": "<<", "rs": ">>", "lS": "<<=", "rS": ">>=", "eq": "==", "ne": "!=",
	"lt": "<", "gt": ">", "le": "<=", "ge": ">=", "ss": "<=>", "nt": "!", "aa": "&&", "oo": "||",
	"pp": "++", "mm": "--", "cm": ",", "pm": "->*", "pt": "->", "cl": "()", "ix": "[]",
}

func (d *demangler) number() int {
	start := d.i
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		d.i++
	}
	n, err := strconv.Atoi(d.s[start:d.i])
	if err != nil {
		return -1 // too long to be a length
	}
	return n
}

func (d *demangler) sourceName() (string, bool) {
	n := d.number()
	if n <= 0 || n > len(d.s)-d.i {
		return "", false
	}
	id := d.s[d.i : d.i+n]
	d.i += n
	if strings.HasPrefix(id, "_GLOBAL__N") {
		return "(anonymous namespace)", true
	}
	return id, true
}

func (d *demangler) substitution() (string, bool) {
	if !d.eat("S") {
		return "", false
	}
	// gdb, like c++filt, spells the standard abbreviations out in full.
	special := map[byte]string{'t': "std", 'a': "std::allocator", 'b': "std::basic_string",
		's': "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
		'i': "std::basic_istream<char, std::char_traits<char> >",
		'o': "std::basic_ostream<char, std::char_traits<char> >",
		'd': "std::basic_iostream<char, std::char_traits<char> >"}
	if s, ok := special[d.peek()]; ok {
		d.i++
		if d.s[d.i-1] == 't' {
			u, ok := d.unqualified(nil)
			if !ok {
				return "", false
			}
			r := "std::" + u
			d.subs = append(d.subs, r)
			return r, true
		}
		return s, true
	}
	idx := 0
	if !d.eat("_") {
		n := 0
		for d.i < len(d.s) && d.peek() != '_' {
			c := d.peek()
			switch {
			case c >= '0' && c <= '9':
				n = n*36 + int(c-'0')
			case c >= 'A' && c <= 'Z':
				n = n*36 + int(c-'A') + 10
			default:
				return "", false
			}
			if n > 1<<20 {
				return "", false
			}
			d.i++
		}
		if !d.eat("_") {
			return "", false
		}
		idx = n + 1
	}
	if idx < 0 || idx >= len(d.subs) {
		return "", false
	}
	return d.subs[idx], true
}

func (d *demangler) templateArgs() (string, bool) {
	if !d.eat("I") {
		return "", false
	}
	var args []string
	for !d.eat("E") {
		if d.i >= len(d.s) {
			return "", false
		}
		var a string
		var ok bool
		if d.eat("L") {
			a, ok = d.literal()
		} else {
			a, ok = d.typ()
		}
		if !ok {
			return "", false
		}
		args = append(args, a)
	}
	d.lastArgs = args
	s := "<" + strings.Join(args, ", ")
	if strings.HasSuffix(s, ">") {
		s += " "
	}
	return s + ">", true
}

func (d *demangler) literal() (string, bool) {
	if d.eat("_Z") {
		e, ok := d.encoding()
		if !ok || !d.eat("E") {
			return "", false
		}
		return e, true
	}
	t, ok := d.typ()
	if !ok {
		return "", false
	}
	neg := d.eat("n")
	start := d.i
	for d.i < len(d.s) && d.peek() != 'E' {
		d.i++
	}
	v := d.s[start:d.i]
	if !d.eat("E") {
		return "", false
	}
	if neg {
		v = "-" + v
	}
	switch t {
	case "bool":
		if v == "0" {
			return "false", true
		}
		return "true", true
	case "int":
		return v, true
	case "unsigned int":
		return v + "u", true
	case "long":
		return v + "l", true
	case "unsigned long":
		return v + "ul", true
	case "char":
		return "(char)" + v, true
	}
	return "(" + t + ")" + v, true
}

var builtinCodes = map[byte]string{
	'v': "void", 'w': "wchar_t", 'b': "bool", 'c': "char", 'a': "signed char", 'h': "unsigned char",
	's': "short", 't': "unsigned short", 'i': "int", 'j': "unsigned int", 'l': "long",
	'm': "unsigned long", 'x': "long long", 'y': "unsigned long long", 'n': "__int128",
	'o': "unsigned __int128", 'f': "float", 'd': "double", 'e': "long double", 'g': "__float128",
	'z': "...",
}

func (d *demangler) typ() (string, bool) {
	d.depth++
	defer func() { d.depth-- }()
	if d.depth > 64 || d.i >= len(d.s) {
		return "", false
	}
	c := d.peek()
	if b, ok := builtinCodes[c]; ok {
		d.i++
		return b, true
	}
	add := func(s string) (string, bool) { d.subs = append(d.subs, s); return s, true }
	switch c {
	case 'P', 'R', 'O':
		d.i++
		t, ok := d.typ()
		if !ok {
			return "", false
		}
		op := map[byte]string{'P': "*", 'R': "&", 'O': "&&"}[c]
		if strings.HasSuffix(t, ")") && strings.Contains(t, " (") && !strings.Contains(t, "(*") {
			// Pointer to function: "int (*)(int)".
			i := strings.Index(t, "(")
			return add(t[:i] + "(" + op + ")" + t[i:])
		}
		return add(t + op)
	case 'K', 'V', 'r':
		d.i++
		t, ok := d.typ()
		if !ok {
			return "", false
		}
		q := map[byte]string{'K': " const", 'V': " volatile", 'r': " restrict"}[c]
		return add(t + q)
	case 'F':
		d.i++
		ret, ok := d.typ()
		if !ok {
			return "", false
		}
		ps, ok := d.params()
		if !ok || !d.eat("E") {
			return "", false
		}
		return add(ret + " (" + ps + ")")
	case 'M':
		d.i++
		cls, ok := d.typ()
		if !ok {
			return "", false
		}
		mem, ok := d.typ()
		if !ok {
			return "", false
		}
		if i := strings.Index(mem, " ("); i >= 0 && strings.HasSuffix(mem, ")") {
			return add(mem[:i] + " (" + cls + "::*)" + mem[i+1:])
		}
		return add(mem + " " + cls + "::*")
	case 'A':
		d.i++
		n := d.number()
		if !d.eat("_") {
			return "", false
		}
		t, ok := d.typ()
		if !ok {
			return "", false
		}
		return add(t + " [" + strconv.Itoa(n) + "]")
	case 'T':
		d.i++
		n := 0
		if !d.eat("_") {
			n = d.number() + 1
			if !d.eat("_") {
				return "", false
			}
		}
		if n < len(d.targs) {
			return add(d.targs[n])
		}
		return "", false
	case 'D':
		switch {
		case d.eat("Dn"):
			return "decltype(nullptr)", true
		case d.eat("Di"):
			return "char32_t", true
		case d.eat("Ds"):
			return "char16_t", true
		case d.eat("Du"):
			return "char8_t", true
		case d.eat("Dd"):
			return "decimal64", true
		case d.eat("De"):
			return "decimal128", true
		case d.eat("Df"):
			return "decimal32", true
		case d.eat("Dh"):
			return "half", true
		case d.eat("Da"):
			return "auto", true
		case d.eat("Dc"):
			return "decltype(auto)", true
		}
		return "", false
	case 'S':
		if strings.HasPrefix(d.s[d.i:], "St") {
			n, ok := d.name()
			if !ok {
				return "", false
			}
			return add(n)
		}
		s, ok := d.substitution()
		if !ok {
			return "", false
		}
		if d.peek() == 'I' {
			args, ok := d.templateArgs()
			if !ok {
				return "", false
			}
			return add(s + args)
		}
		return s, true
	case 'N', 'Z':
		n, ok := d.name()
		if !ok {
			return "", false
		}
		return add(n)
	}
	if c >= '0' && c <= '9' {
		n, ok := d.name()
		if !ok {
			return "", false
		}
		return add(n)
	}
	return "", false
}
