package symbols

import "fmt"

// fortranArray prints a Fortran array as gdb does: dimensions nested with the first index
// innermost, "((1, 2) (3, 4))", runs of equal elements as "<repeats N times>".
func (f *formatter) fortranArray(v *Value, s *Type, depth int) {
	dims, err := arrayDims(v.Type)
	if err != nil {
		f.w("<error: " + err.Error() + ">")
		return
	}
	v.preload()
	w := &fwalker{f: f, v: v, elt: s.Elem, dims: dims, depth: depth}
	if len(dims) == 0 {
		f.w("()")
		return
	}
	w.walk(1, 0, false)
}

// fwalker walks a Fortran array from the last dimension (outermost) to the first.
type fwalker struct {
	f        *formatter
	v        *Value
	elt      *Type
	dims     []dimInfo
	depth    int
	elems    int64
	nrepeats int64
	havePrev bool
	prevOff  int64
}

func (w *fwalker) dim(level int) dimInfo { return w.dims[len(w.dims)-level] }

func (w *fwalker) continueWalking(more bool) bool {
	cont := more && w.elems < int64(w.f.opts.MaxElements)
	if !cont && more {
		w.f.w("...")
	}
	return cont
}

func (w *fwalker) walk(level int, off int64, lastP bool) {
	d := w.dim(level)
	w.havePrev = false
	w.f.w("(")
	n := len(w.dims)
	for i := int64(0); w.continueWalking(i < d.count); i++ {
		o := off + i*d.stride
		if level != n {
			w.processDimension(level, o, i == d.count-1)
		} else {
			w.processElement(o, i == d.count-1)
		}
	}
	w.f.w(")")
	if !(lastP || level == 1) {
		w.f.w(" ")
	}
}

func (w *fwalker) processDimension(level int, off int64, lastP bool) {
	prevHave, prevOff := w.havePrev, w.prevOff
	inner := w.dim(level + 1).count
	repeated := prevHave && w.elems+(w.nrepeats+1)*inner <= int64(w.f.opts.MaxElements) &&
		w.subEqual(level+1, prevOff, off)
	if repeated {
		w.nrepeats++
	}
	if !repeated || lastP {
		nrep := w.nrepeats
		w.nrepeats = 0
		if nrep >= int64(w.f.opts.RepeatThreshold) {
			w.f.w(fmt.Sprintf("<repeats %d times>", nrep+1))
			if !repeated {
				w.f.w(" ")
			}
			w.elems += nrep * inner
		} else {
			for i := nrep; i > 0; i-- {
				w.walk(level+1, prevOff, repeated && i == 1)
			}
		}
		if !repeated {
			if w.elems < int64(w.f.opts.MaxElements) {
				w.walk(level+1, off, lastP)
			} else if lastP {
				w.f.w("...")
			}
		}
	}
	w.havePrev, w.prevOff = true, off
}

func (w *fwalker) element(off int64) *Value { return w.v.sub("", w.elt, off) }

func (w *fwalker) processElement(off int64, lastP bool) {
	repeated := false
	if w.havePrev {
		repeated = sameContents(w.element(w.prevOff), w.element(off))
	}
	if repeated {
		w.nrepeats++
	}
	if !repeated || lastP || w.elems+1 == int64(w.f.opts.MaxElements) {
		nrep := w.nrepeats
		printed := false
		if nrep != 0 {
			w.nrepeats = 0
			if nrep >= int64(w.f.opts.RepeatThreshold) {
				w.f.w(fmt.Sprintf("<repeats %d times>", nrep+1))
			} else {
				e := w.element(w.prevOff)
				for i := nrep; i > 0; i-- {
					w.f.value(e, w.depth+1)
					if i > 1 {
						w.f.w(", ")
					}
				}
			}
			printed = true
		}
		if !repeated {
			if printed {
				w.f.w(", ")
			}
			w.f.value(w.element(off), w.depth+1)
		}
		if !lastP {
			w.f.w(", ")
		}
	}
	w.havePrev, w.prevOff = true, off
	w.elems++
}

// subEqual compares two sub-arrays starting at the given level element by element.
func (w *fwalker) subEqual(level int, a, b int64) bool {
	if level > len(w.dims) {
		return sameContents(w.element(a), w.element(b))
	}
	d := w.dim(level)
	for i := int64(0); i < d.count; i++ {
		if !w.subEqual(level+1, a+i*d.stride, b+i*d.stride) {
			return false
		}
	}
	return true
}

// preload reads an in-memory aggregate once, so that its elements are sliced from one read
// instead of being read one by one. Failure leaves the value as it was.
func (v *Value) preload() {
	if !v.inMem || v.data != nil || v.optOut || v.err != nil || v.Type.Size <= 0 || v.Type.Size > 1<<20 {
		return
	}
	b := make([]byte, v.Type.Size)
	if err := v.proc.ReadMemory(b, v.addr); err == nil {
		v.data = b
	}
}
