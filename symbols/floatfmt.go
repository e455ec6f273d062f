package symbols

import (
	"debug/elf"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// x87ToBig converts an x87 80-bit extended value (little-endian, at least 10 bytes) to a
// big.Float; NaN becomes 0 (callers check the exponent first).
func x87ToBig(b []byte) *big.Float {
	mant := uint64(0)
	for i := 7; i >= 0; i-- {
		mant = mant<<8 | uint64(b[i])
	}
	se := uint16(b[8]) | uint16(b[9])<<8
	sign := se>>15 != 0
	exp := int(se & 0x7fff)
	f := new(big.Float).SetPrec(64)
	if exp == 0 && mant == 0 {
		if sign {
			f.Neg(f)
		}
		return f
	}
	if exp == 0x7fff {
		if mant<<1 == 0 {
			f.SetInf(sign)
		}
		return f
	}
	if exp == 0 {
		exp = 1 // denormal
	}
	f.SetUint64(mant)
	f.SetMantExp(f, exp-16383-63)
	if sign {
		f.Neg(f)
	}
	return f
}

// decimalDigits is gdb's precision for a binary format with p mantissa bits:
// ceil(1 + p*log10(2)).
func decimalDigits(p int) int {
	d := 1 + float64(p)*0.30102999566398119521
	n := int(d)
	if float64(n) < d {
		n++
	}
	return n
}

// formatFloatBytes renders a floating-point value the way gdb prints it ("%.17g" for
// double, "%.9g" for float, "%.21Lg" for x87 long double, "nan(0x...)", "inf").
func formatFloatBytes(b []byte, a *Arch) string {
	switch len(b) {
	case 4:
		u := uint32(uintFrom(b, a))
		f := math.Float32frombits(u)
		if math.IsNaN(float64(f)) {
			return nanString(u>>31 != 0, uint64(u&0x7fffff))
		}
		return cFormatG(float64(f), decimalDigits(24))
	case 8:
		u := uintFrom(b, a)
		f := math.Float64frombits(u)
		if math.IsNaN(f) {
			return nanString(u>>63 != 0, u&(1<<52-1))
		}
		return cFormatG(f, decimalDigits(53))
	case 10, 12, 16:
		if a.Machine == elf.EM_X86_64 {
			se := uint16(b[8]) | uint16(b[9])<<8
			if se&0x7fff == 0x7fff {
				mant := uint64(0)
				for i := 7; i >= 0; i-- {
					mant = mant<<8 | uint64(b[i])
				}
				if mant<<1 != 0 {
					return nanString(se>>15 != 0, mant&(1<<63-1))
				}
			}
			return bigFormatG(x87ToBig(b), decimalDigits(64))
		}
		if len(b) == 16 {
			hi := math.Float64frombits(uintFrom(b[:8], a))
			lo := math.Float64frombits(uintFrom(b[8:], a))
			f := new(big.Float).SetPrec(106).SetFloat64(hi)
			f.Add(f, new(big.Float).SetFloat64(lo))
			return bigFormatG(f, decimalDigits(106))
		}
	}
	return fmt.Sprintf("<%d-byte float>", len(b))
}

func nanString(neg bool, mant uint64) string {
	s := fmt.Sprintf("nan(0x%x)", mant)
	if neg {
		return "-" + s
	}
	return s
}

// cFormatG formats like C's printf("%.*g").
func cFormatG(f float64, prec int) string {
	if math.IsInf(f, 1) {
		return "inf"
	}
	if math.IsInf(f, -1) {
		return "-inf"
	}
	return fixExp(strconv.FormatFloat(f, 'g', prec, 64))
}

// fixExp trims trailing zeros of the mantissa as %g does and writes at least two exponent
// digits.
func fixExp(s string) string {
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i:]
	}
	if strings.Contains(mant, ".") {
		mant = strings.TrimRight(mant, "0")
		mant = strings.TrimSuffix(mant, ".")
	}
	if exp != "" {
		sign := exp[1]
		digits := exp[2:]
		if len(digits) < 2 {
			digits = "0" + digits
		}
		exp = "e" + string(sign) + digits
	}
	return mant + exp
}

// bigFormatG formats a big.Float like %.*g.
func bigFormatG(f *big.Float, prec int) string {
	if f.IsInf() {
		if f.Sign() < 0 {
			return "-inf"
		}
		return "inf"
	}
	if f.Sign() == 0 {
		if f.Signbit() {
			return "-0"
		}
		return "0"
	}
	// Decide between fixed and exponent notation from the decimal exponent after rounding.
	e := f.Text('e', prec-1) // d.ddddde±XX
	i := strings.IndexByte(e, 'e')
	x, _ := strconv.Atoi(e[i+1:])
	if x < -4 || x >= prec {
		return fixExp(e)
	}
	return fixExp(f.Text('f', prec-1-x))
}
