package symbols

import (
	"fmt"
	"strings"
)

// fortranIntrinsic evaluates the Fortran intrinsic functions gdb understands: ABS, MOD,
// MODULO, MAX, MIN, SIZE, LBOUND, UBOUND, ALLOCATED, ASSOCIATED, KIND and LEN. ok is false
// when name is not one of them.
func (e *evaluator) fortranIntrinsic(name string, args []*node) (*Value, bool, error) {
	name = strings.ToLower(name)
	switch name {
	case "abs", "mod", "modulo", "max", "min", "size", "lbound", "ubound", "allocated", "associated", "kind", "len":
	default:
		return nil, false, nil
	}
	if name == "allocated" || name == "associated" {
		if len(args) != 1 || args[0].op != "ident" {
			return nil, true, fmt.Errorf("%s needs one variable", strings.ToUpper(name))
		}
		v, err := e.rawIdent(args[0].text)
		if err != nil {
			return nil, true, err
		}
		return e.mkBool(v.state == ""), true, nil
	}
	vals := make([]*Value, len(args))
	for i, a := range args {
		v, err := e.eval(a)
		if err != nil {
			return nil, true, err
		}
		vals[i] = rval(v)
	}
	intT := e.builtin("integer(kind=4)")
	switch name {
	case "abs":
		if len(vals) != 1 {
			return nil, true, fmt.Errorf("ABS takes one argument")
		}
		if isFloatType(vals[0].Type) {
			f, err := vals[0].Float()
			if err != nil {
				return nil, true, err
			}
			if f < 0 {
				f = -f
			}
			return e.mkFloat(vals[0].Type.Strip(), f), true, nil
		}
		n, err := vals[0].Int()
		if err != nil {
			return nil, true, err
		}
		if n < 0 {
			n = -n
		}
		return e.mkInt(vals[0].Type.Strip(), uint64(n)), true, nil
	case "mod", "modulo", "max", "min":
		if len(vals) < 2 {
			return nil, true, fmt.Errorf("%s takes two arguments", strings.ToUpper(name))
		}
		if name == "max" || name == "min" {
			best := vals[0]
			for _, v := range vals[1:] {
				gt, err := e.arith(">", v, best)
				if err != nil {
					return nil, true, err
				}
				t, _ := truth(gt)
				if t == (name == "max") {
					best = v
				}
			}
			return best, true, nil
		}
		r, err := e.arith("%", vals[0], vals[1])
		if err != nil || name == "mod" {
			return r, true, err
		}
		// MODULO takes the sign of the divisor.
		x, _ := r.Int()
		d, _ := vals[1].Int()
		if x != 0 && (x < 0) != (d < 0) {
			x += d
		}
		return e.mkInt(r.Type, uint64(x)), true, nil
	case "kind":
		return e.mkInt(intT, uint64(vals[0].Type.Strip().Size)), true, nil
	case "len":
		s := vals[0].Type.Strip()
		if s.Kind != KindString {
			return nil, true, fmt.Errorf("LEN needs a character value")
		}
		return e.mkInt(intT, uint64(s.StrLen.Const)), true, nil
	}
	// SIZE, LBOUND, UBOUND with an optional dimension argument.
	if len(vals) < 1 || len(vals) > 2 {
		return nil, true, fmt.Errorf("%s takes one or two arguments", strings.ToUpper(name))
	}
	if vals[0].state != "" {
		return nil, true, fmt.Errorf("%s of an array that is %s", strings.ToUpper(name), vals[0].state)
	}
	dims, err := arrayDims(vals[0].Type)
	if err != nil {
		return nil, true, err
	}
	pick := -1
	if len(vals) == 2 {
		k, err := vals[1].Int()
		if err != nil {
			return nil, true, err
		}
		if k < 1 || int(k) > len(dims) {
			return nil, true, fmt.Errorf("DIM argument to %s must be between 1 and %d", strings.ToUpper(name), len(dims))
		}
		pick = int(k) - 1
	}
	switch name {
	case "size":
		n := int64(1)
		for i, d := range dims {
			if pick < 0 || i == pick {
				n *= d.count
			}
		}
		return e.mkInt(intT, uint64(n)), true, nil
	default:
		if pick < 0 {
			if len(dims) != 1 {
				return nil, true, fmt.Errorf("%s of a multi-dimensional array needs a DIM argument", strings.ToUpper(name))
			}
			pick = 0
		}
		d := dims[pick]
		v := d.lower
		if name == "ubound" {
			v = d.lower + d.count - 1
		}
		return e.mkInt(intT, uint64(v)), true, nil
	}
}

// rawIdent looks a name up without resolving errors (ALLOCATED looks at the state).
func (e *evaluator) rawIdent(name string) (*Value, error) {
	name = strings.ToLower(name)
	if e.f != nil {
		return e.f.Lookup(name)
	}
	return e.p.LookupGlobal(name, nil)
}
