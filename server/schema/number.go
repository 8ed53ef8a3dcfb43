package schema

import (
	"math"
	"strconv"
)

// decimal is a JSON number literal read as an exact decimal:
// (-1)^neg × digits[lo:hi] × 10^exp, where digits is the literal's integer
// digits followed by its fraction digits, and [lo, hi) drops leading and
// trailing zeros (empty for zero). No float is involved.
type decimal struct {
	neg    bool
	ip, fp string // integer and fraction digits as written
	lo, hi int
	exp    int64
	huge   bool // the exponent was too large to hold; exp is saturated
}

// maxExp bounds the exponents held exactly; beyond it a number is "huge".
const maxExp = 1e15

// readDecimal reads a number literal that Parse accepted. On text it did not
// accept it returns something harmless rather than panic.
func readDecimal(lit string) decimal {
	var d decimal
	i := 0
	if i < len(lit) && lit[i] == '-' {
		d.neg = true
		i++
	}
	j := i
	for j < len(lit) && isDigit(lit[j]) {
		j++
	}
	d.ip = lit[i:j]
	if j < len(lit) && lit[j] == '.' {
		k := j + 1
		for k < len(lit) && isDigit(lit[k]) {
			k++
		}
		d.fp = lit[j+1 : k]
		j = k
	}
	var e int64
	if j < len(lit) && (lit[j] == 'e' || lit[j] == 'E') {
		j++
		eneg := false
		if j < len(lit) && (lit[j] == '+' || lit[j] == '-') {
			eneg = lit[j] == '-'
			j++
		}
		for ; j < len(lit) && isDigit(lit[j]); j++ {
			if e > maxExp {
				d.huge = true
				continue
			}
			e = e*10 + int64(lit[j]-'0')
		}
		if eneg {
			e = -e
		}
	}
	total := len(d.ip) + len(d.fp)
	lo := 0
	for lo < total && d.digit(lo) == '0' {
		lo++
	}
	hi := total
	for hi > lo && d.digit(hi-1) == '0' {
		hi--
	}
	d.lo, d.hi = lo, hi
	d.exp = e - int64(len(d.fp)) + int64(total-hi)
	return d
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (d *decimal) digit(i int) byte {
	if i < len(d.ip) {
		return d.ip[i]
	}
	return d.fp[i-len(d.ip)]
}

func (d *decimal) isZero() bool { return d.hi == d.lo }

// numErr is why a decimal does not fit an int64 at some scale.
type numErr uint8

const (
	numOK       numErr = iota
	numFraction        // more fraction digits than the scale allows
	numTooBig          // above math.MaxInt64 once scaled
	numTooSmall        // below math.MinInt64 once scaled
)

// scaled returns d × 10^scale as an int64 when that is an integer that fits.
func (d *decimal) scaled(scale int64) (int64, numErr) {
	if d.isZero() {
		return 0, numOK
	}
	over := numTooBig
	if d.neg {
		over = numTooSmall
	}
	if d.huge {
		if d.exp < 0 {
			return 0, numFraction
		}
		return 0, over
	}
	e := d.exp + scale
	if e < 0 {
		return 0, numFraction
	}
	if int64(d.hi-d.lo)+e > 19 { // 19 digits always fit a uint64
		return 0, over
	}
	var u uint64
	for i := d.lo; i < d.hi; i++ {
		u = u*10 + uint64(d.digit(i)-'0')
	}
	for ; e > 0; e-- {
		u *= 10
	}
	limit := uint64(math.MaxInt64)
	if d.neg {
		limit++
	}
	if u > limit {
		return 0, over
	}
	if d.neg {
		return int64(-u), numOK
	}
	return int64(u), numOK
}

// appendCanonical appends d's canonical spelling (see Value.AppendJSON):
// the shortest exact decimal, plain for integers of up to 21 digits, for
// numbers with a fraction and an integer digit, and down to 0.000001;
// ECMAScript-style exponent otherwise (1e+21, 1.5e-7). So 100, 1e2, 100.0
// and 1.00e+2 all render as 100. Numbers whose exponent is beyond ±10^15 are
// rendered as written (with a lower-case e); lit is the literal d was read
// from.
func (d *decimal) appendCanonical(dst []byte, lit string) []byte {
	if d.isZero() {
		return append(dst, '0')
	}
	if d.huge {
		for i := 0; i < len(lit); i++ {
			c := lit[i]
			if c == 'E' {
				c = 'e'
			}
			dst = append(dst, c)
		}
		return dst
	}
	if d.neg {
		dst = append(dst, '-')
	}
	n := int64(d.hi - d.lo)
	point := n + d.exp // digits before the decimal point
	switch {
	case d.exp >= 0 && point <= 21:
		dst = d.appendDigits(dst, d.lo, d.hi)
		for range d.exp {
			dst = append(dst, '0')
		}
	case d.exp < 0 && point > 0:
		mid := d.lo + int(point)
		dst = d.appendDigits(dst, d.lo, mid)
		dst = append(dst, '.')
		dst = d.appendDigits(dst, mid, d.hi)
	case d.exp < 0 && point > -6:
		dst = append(dst, '0', '.')
		for range -point {
			dst = append(dst, '0')
		}
		dst = d.appendDigits(dst, d.lo, d.hi)
	default:
		dst = append(dst, d.digit(d.lo))
		if n > 1 {
			dst = append(dst, '.')
			dst = d.appendDigits(dst, d.lo+1, d.hi)
		}
		dst = append(dst, 'e')
		if point-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, point-1, 10)
	}
	return dst
}

func (d *decimal) appendDigits(dst []byte, from, to int) []byte {
	for i := from; i < to; i++ {
		dst = append(dst, d.digit(i))
	}
	return dst
}

// centsText writes an amount in cents as MXN in canonical form (12.5, 0.05,
// 1000000000), for messages and ctx.
func centsText(c int64) string {
	return string(canonicalNumber(nil, strconv.FormatInt(c, 10)+"e-2"))
}

// canonicalNumber appends the canonical spelling of the number literal lit.
func canonicalNumber(dst []byte, lit string) []byte {
	d := readDecimal(lit)
	return d.appendCanonical(dst, lit)
}
