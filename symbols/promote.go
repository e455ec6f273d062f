package symbols

// C's integer promotions and usual arithmetic conversions over DWARF types: one rule for the
// front end's evaluator (expr_ops.go) and the condition compiler (compile_ops.go), since an
// agent and the front end must decide the same condition alike.

// signed reports whether an integer type's values are signed: a signed integer, a signed
// char, an enumeration of signed (or unrecorded) base.
func signed(s *Type) bool {
	switch s.Kind {
	case KindInt:
		return true
	case KindChar:
		return s.Encoding == ateSignedChar
	case KindEnum:
		return s.Elem == nil || s.Elem.Strip().Kind == KindInt
	}
	return false
}

// promotedInt is the size and signedness of an integer operand after the integer promotions:
// anything narrower than int becomes int; the rest keep their own width and signedness (an
// enumeration its base's, whatever its width).
func promotedInt(t *Type) (size int64, sgn bool) {
	s := t.Strip()
	if s.Size < 4 {
		return 4, true
	}
	return s.Size, signed(s)
}

// convertedInt is the common integer type of two operands (the usual arithmetic
// conversions): the wider promoted operand's, or of equal widths unsigned if either is.
func convertedInt(a, b *Type) (size int64, sgn bool) {
	la, sa := promotedInt(a)
	lb, sb := promotedInt(b)
	switch {
	case la > lb:
		return la, sa
	case lb > la:
		return lb, sb
	}
	return la, sa && sb
}
