// Package rankset implements sets of MPI ranks written in the MPIR subset notation, which
// hpcdap uses wherever a group of ranks is named: the launch focus, breakpoints per rank,
// run control of a group, and the rank sets shown at each node of a merged stack tree.
//
// The notation is a list of items separated by spaces or commas. An item is a rank ("5"), an
// inclusive range ("4-6"), or a range with a stride ("0-$max:2"). "$max" stands for the largest
// rank of the job, so it can only be resolved when the job's size is known. "all" and "*" name
// every rank. Sets are printed in compact form, "0-511,513-1023", "0-62:2" or "0-56:8,1-57:8",
// which Parse accepts back.
package rankset

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Set is an immutable set of non-negative ranks. The zero value is the empty set.
type Set struct {
	iv []interval // sorted, disjoint, non-adjacent
}

type interval struct{ lo, hi int } // inclusive

// maxExpand bounds how many stride items one parse may produce, so that input such as
// "0-2000000000:2" is refused instead of exhausting memory.
const maxExpand = 1 << 22

// Parse reads a set in MPIR subset notation. size is the number of ranks in the job (ranks
// 0 … size-1): "$max" is size-1, "all" is every rank, and a rank ≥ size is an error. With size
// < 0 the job size is unknown: ranks are not range-checked, and "$max" and "all" are errors.
func Parse(s string, size int) (Set, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' || r == '\n' })
	var ivs []interval
	expanded := 0
	for _, f := range fields {
		if f == "all" || f == "*" {
			if size < 0 {
				return Set{}, fmt.Errorf("rankset: parse %q: %q needs the job size", s, f)
			}
			if size > 0 {
				ivs = append(ivs, interval{0, size - 1})
			}
			continue
		}
		lo, hi, stride, err := parseItem(f, size)
		if err != nil {
			return Set{}, fmt.Errorf("rankset: parse %q: %w", s, err)
		}
		if stride == 1 {
			ivs = append(ivs, interval{lo, hi})
			continue
		}
		n := (hi-lo)/stride + 1
		if expanded += n; expanded > maxExpand {
			return Set{}, fmt.Errorf("rankset: parse %q: strided items name more than %d ranks", s, maxExpand)
		}
		for r := lo; r <= hi; r += stride {
			ivs = append(ivs, interval{r, r})
		}
	}
	return normalize(ivs), nil
}

// MustParse is Parse for constant sets in programs and tests; it panics on error.
func MustParse(s string, size int) Set {
	set, err := Parse(s, size)
	if err != nil {
		panic(err)
	}
	return set
}

func parseItem(f string, size int) (lo, hi, stride int, err error) {
	stride = 1
	if i := strings.IndexByte(f, ':'); i >= 0 {
		stride, err = strconv.Atoi(f[i+1:])
		if err != nil || stride < 1 {
			return 0, 0, 0, fmt.Errorf("item %q: bad stride %q", f, f[i+1:])
		}
		f = f[:i]
	}
	a, b, isRange := strings.Cut(f, "-")
	if lo, err = parseRank(a, size); err != nil {
		return 0, 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = parseRank(b, size); err != nil {
			return 0, 0, 0, err
		}
	} else if stride != 1 {
		return 0, 0, 0, fmt.Errorf("item %q: a stride needs a range", f)
	}
	if hi < lo {
		return 0, 0, 0, fmt.Errorf("item %q: range is reversed", f)
	}
	return lo, hi, stride, nil
}

func parseRank(s string, size int) (int, error) {
	if s == "$max" {
		if size < 0 {
			return 0, fmt.Errorf("%q needs the job size", s)
		}
		if size == 0 {
			return 0, fmt.Errorf("%q: the job has no ranks", s)
		}
		return size - 1, nil
	}
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad rank %q", s)
	}
	r, err := strconv.Atoi(s)
	if err != nil || r > 1<<31-1 {
		return 0, fmt.Errorf("bad rank %q", s)
	}
	if size >= 0 && r >= size {
		return 0, fmt.Errorf("rank %d is out of range (the job has %d ranks)", r, size)
	}
	return r, nil
}

func normalize(ivs []interval) Set {
	if len(ivs) == 0 {
		return Set{}
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].lo < ivs[j].lo })
	out := ivs[:1]
	for _, v := range ivs[1:] {
		last := &out[len(out)-1]
		if v.lo <= last.hi+1 {
			if v.hi > last.hi {
				last.hi = v.hi
			}
			continue
		}
		out = append(out, v)
	}
	return Set{iv: append([]interval(nil), out...)}
}

// Of returns the set of the given ranks. Negative ranks are ignored.
func Of(ranks ...int) Set {
	ivs := make([]interval, 0, len(ranks))
	for _, r := range ranks {
		if r >= 0 {
			ivs = append(ivs, interval{r, r})
		}
	}
	return normalize(ivs)
}

// Range returns the set lo … hi inclusive (empty if hi < lo).
func Range(lo, hi int) Set {
	if hi < lo || hi < 0 {
		return Set{}
	}
	if lo < 0 {
		lo = 0
	}
	return Set{iv: []interval{{lo, hi}}}
}

// All returns the set of every rank of a job of the given size.
func All(size int) Set { return Range(0, size-1) }

// Len reports how many ranks the set holds.
func (s Set) Len() int {
	n := 0
	for _, v := range s.iv {
		n += v.hi - v.lo + 1
	}
	return n
}

// Empty reports whether the set holds no rank.
func (s Set) Empty() bool { return len(s.iv) == 0 }

// Contains reports whether rank r is in the set.
func (s Set) Contains(r int) bool {
	i := sort.Search(len(s.iv), func(i int) bool { return s.iv[i].hi >= r })
	return i < len(s.iv) && s.iv[i].lo <= r
}

// Min returns the smallest rank, or -1 for the empty set.
func (s Set) Min() int {
	if len(s.iv) == 0 {
		return -1
	}
	return s.iv[0].lo
}

// Max returns the largest rank, or -1 for the empty set.
func (s Set) Max() int {
	if len(s.iv) == 0 {
		return -1
	}
	return s.iv[len(s.iv)-1].hi
}

// Ranks lists the ranks in increasing order.
func (s Set) Ranks() []int {
	out := make([]int, 0, s.Len())
	s.Each(func(r int) bool { out = append(out, r); return true })
	return out
}

// Each calls f for every rank in increasing order until f returns false.
func (s Set) Each(f func(rank int) bool) {
	for _, v := range s.iv {
		for r := v.lo; r <= v.hi; r++ {
			if !f(r) {
				return
			}
		}
	}
}

// Add returns the set with rank r added.
func (s Set) Add(r int) Set { return s.Union(Of(r)) }

// Union returns the ranks in s or t.
func (s Set) Union(t Set) Set {
	ivs := make([]interval, 0, len(s.iv)+len(t.iv))
	ivs = append(append(ivs, s.iv...), t.iv...)
	return normalize(ivs)
}

// Intersect returns the ranks in both s and t.
func (s Set) Intersect(t Set) Set {
	var out []interval
	i, j := 0, 0
	for i < len(s.iv) && j < len(t.iv) {
		a, b := s.iv[i], t.iv[j]
		lo, hi := max(a.lo, b.lo), min(a.hi, b.hi)
		if lo <= hi {
			out = append(out, interval{lo, hi})
		}
		if a.hi < b.hi {
			i++
		} else {
			j++
		}
	}
	return Set{iv: out}
}

// Minus returns the ranks in s that are not in t.
func (s Set) Minus(t Set) Set {
	var out []interval
	j := 0
	for _, a := range s.iv {
		lo := a.lo
		for j < len(t.iv) && t.iv[j].hi < lo {
			j++
		}
		k := j
		for k < len(t.iv) && t.iv[k].lo <= a.hi {
			if t.iv[k].lo > lo {
				out = append(out, interval{lo, t.iv[k].lo - 1})
			}
			lo = t.iv[k].hi + 1
			k++
		}
		if lo <= a.hi {
			out = append(out, interval{lo, a.hi})
		}
	}
	return Set{iv: out}
}

// Equal reports whether s and t hold the same ranks.
func (s Set) Equal(t Set) bool {
	if len(s.iv) != len(t.iv) {
		return false
	}
	for i := range s.iv {
		if s.iv[i] != t.iv[i] {
			return false
		}
	}
	return true
}

// String prints the set in its compact MPIR form, which Parse reads back to the same set:
// ranges as "lo-hi", and a run of evenly spaced single ranks as "lo-hi:stride" where that is
// shorter than listing them ("0,2,4,…,62" prints as "0-62:2"), as in "0-3,8-20:4,31". Evenly
// spaced ranges of one width, such as the first two ranks of every node of eight, print as one
// strided item per offset in the range where that is shorter ("0-1,8-9,…,56-57" prints as
// "0-56:8,1-57:8"). Runs are taken greedily from the lowest rank; a run not shorter in strided
// form is listed whole (a run starting inside it would not be shorter either: its strided
// items are as long, its list shorter). The empty set prints as "".
func (s Set) String() string {
	var b strings.Builder
	strided := 0 // ranks printed in strided items, which Parse bounds by maxExpand
	item := func(v interval) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(v.lo))
		if v.hi != v.lo {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(v.hi))
		}
	}
	for i := 0; i < len(s.iv); {
		v := s.iv[i]
		if end, period := s.periodicRun(i); end > i+1 {
			// Parse expands at most maxExpand ranks from strided items: a longer run is cut.
			width := v.hi - v.lo + 1
			end = min(end, i+(maxExpand-strided)/width)
			if n := end - i; n > 1 {
				listed := s.listedLen(i, end)
				if s.stridedLen(i, end, period, listed) < listed {
					last := s.iv[end-1]
					for k := range width {
						if b.Len() > 0 {
							b.WriteByte(',')
						}
						b.WriteString(strconv.Itoa(v.lo + k))
						b.WriteByte('-')
						b.WriteString(strconv.Itoa(last.lo + k))
						b.WriteByte(':')
						b.WriteString(strconv.Itoa(period))
					}
					strided += n * width
				} else {
					for _, w := range s.iv[i:end] {
						item(w)
					}
				}
				i = end
				continue
			}
		}
		item(v)
		i++
	}
	return b.String()
}

// periodicRun returns the end (exclusive) and the spacing of the longest run of intervals
// from iv[i] that have iv[i]'s width and are evenly spaced; end is i+1 when there is none.
func (s Set) periodicRun(i int) (end, period int) {
	v := s.iv[i]
	sameWidth := func(w interval) bool { return w.hi-w.lo == v.hi-v.lo }
	if i+1 >= len(s.iv) || !sameWidth(s.iv[i+1]) {
		return i + 1, 0
	}
	period = s.iv[i+1].lo - v.lo
	end = i + 2
	for end < len(s.iv) && sameWidth(s.iv[end]) && s.iv[end].lo-s.iv[end-1].lo == period {
		end++
	}
	return end, period
}

// stridedLen is the length of the run iv[i:end] (one width, spaced by period) printed as one
// strided item per offset in its intervals ("0-56:8,1-57:8"), or a length ≥ limit once it
// reaches limit: a run of wide ranges is not printed to be measured.
func (s Set) stridedLen(i, end, period, limit int) int {
	first, last := s.iv[i], s.iv[end-1]
	n := first.hi - first.lo // the commas between the items
	for k := 0; k <= first.hi-first.lo && n < limit; k++ {
		n += digits(first.lo+k) + 1 + digits(last.lo+k) + 1 + digits(period)
	}
	return n
}

// listedLen is the length of the intervals iv[i:end] listed with commas.
func (s Set) listedLen(i, end int) int {
	n := end - i - 1
	for _, v := range s.iv[i:end] {
		n += digits(v.lo)
		if v.hi != v.lo {
			n += 1 + digits(v.hi)
		}
	}
	return n
}

// digits is the length of a non-negative number in decimal.
func digits(x int) int {
	n := 1
	for ; x >= 10; x /= 10 {
		n++
	}
	return n
}

// MarshalText encodes the set as String does, so sets travel in JSON as strings.
func (s Set) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a set in MPIR subset notation whose job size is unknown.
func (s *Set) UnmarshalText(b []byte) error {
	set, err := Parse(string(b), -1)
	if err != nil {
		return err
	}
	*s = set
	return nil
}
