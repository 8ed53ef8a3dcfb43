package schema

import (
	"cmp"
	"encoding/json"
	"io"
	"iter"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Value is a read-only view of one value in a parsed document. It is two
// words, cheap to copy and safe for concurrent use. The zero Value is
// "absent": what Field returns for a member that is not there.
//
// Accessors never panic: asked for the wrong kind they return the zero of
// their type ("" for String, 0 for Int, false for Bool...). After a
// successful Validate the value has the kind and range its schema promises,
// so handlers read it without further checks.
type Value struct {
	d *doc
	i int32
}

func (v Value) node() *node { return &v.d.nodes[v.i] }

// Kind returns v's JSON type, KindAbsent for the zero Value.
func (v Value) Kind() Kind {
	if v.d == nil {
		return KindAbsent
	}
	return v.node().kind
}

// Present reports whether v is there (null counts as present).
func (v Value) Present() bool { return v.d != nil }

// IsNull reports whether v is a JSON null.
func (v Value) IsNull() bool { return v.Kind() == KindNull }

// Field returns the member called name (compared exactly, case included) of
// an object, or the absent Value when v is not an object or has no such
// member.
func (v Value) Field(name string) Value {
	if v.d == nil {
		return Value{}
	}
	n := v.node()
	if n.kind != KindObject {
		return Value{}
	}
	nodes := v.d.nodes
	j := v.i + 1
	for k := int32(0); k < n.n; k++ {
		c := &nodes[j]
		if v.d.key(c) == name {
			return Value{v.d, j}
		}
		j = c.end
	}
	return Value{}
}

// Len returns the number of elements of an array or members of an object,
// 0 for anything else.
func (v Value) Len() int {
	switch v.Kind() {
	case KindArray, KindObject:
		return int(v.node().n)
	}
	return 0
}

// Index returns element i of an array, or the absent Value when v is not an
// array or i is out of range. It walks the array: use Items to visit all.
func (v Value) Index(i int) Value {
	if v.Kind() != KindArray || i < 0 || i >= v.Len() {
		return Value{}
	}
	j := v.i + 1
	for ; i > 0; i-- {
		j = v.d.nodes[j].end
	}
	return Value{v.d, j}
}

// Items yields the index and value of each element of an array, in order;
// nothing for anything else.
func (v Value) Items() iter.Seq2[int, Value] {
	return func(yield func(int, Value) bool) {
		if v.Kind() != KindArray {
			return
		}
		j := v.i + 1
		for k := range int(v.node().n) {
			if !yield(k, Value{v.d, j}) {
				return
			}
			j = v.d.nodes[j].end
		}
	}
}

// Members yields the name and value of each member of an object, in the
// order they were written; nothing for anything else.
func (v Value) Members() iter.Seq2[string, Value] {
	return func(yield func(string, Value) bool) {
		if v.Kind() != KindObject {
			return
		}
		j := v.i + 1
		for range v.node().n {
			c := &v.d.nodes[j]
			if !yield(v.d.key(c), Value{v.d, j}) {
				return
			}
			j = c.end
		}
	}
}

// String returns the text of a string (unescaped), "" for anything else.
// The result shares memory with the document; it is an ordinary immutable
// Go string.
func (v Value) String() string {
	if v.Kind() != KindString {
		return ""
	}
	return v.d.text(v.node())
}

// NumberText returns a number exactly as written in the document, "" for
// anything else.
func (v Value) NumberText() string {
	if v.Kind() != KindNumber {
		return ""
	}
	return v.d.text(v.node())
}

// Bool returns the value of a boolean, false for anything else.
func (v Value) Bool() bool {
	return v.Kind() == KindBool && v.node().flags&flagTrue != 0
}

// Int returns an integral number (5, 5.0 and 5e0 alike) as an int64; 0 for
// anything else, including numbers with a fraction and numbers outside the
// int64 range.
func (v Value) Int() int64 { return v.scaled(0) }

// Cents returns a money amount in MXN as integer cents, exactly (10.5 →
// 1050, 1e2 → 10000); 0 for anything else, including amounts with more than
// two decimals and amounts whose cents overflow an int64.
func (v Value) Cents() int64 { return v.scaled(2) }

// scaled returns a number times 10^places when that is an int64 exactly;
// 0 for anything else.
func (v Value) scaled(places int64) int64 {
	if v.Kind() != KindNumber {
		return 0
	}
	d := readDecimal(v.d.text(v.node()))
	n, err := d.scaled(places)
	if err != numOK {
		return 0
	}
	return n
}

// Float returns a number as the nearest float64 (±Inf beyond its range), 0
// for anything else. A zero is +0 however it was written (-0, -0.0, -1e-400):
// a stored -0 came back as -0 in a catalog's descuento_pct and an event's
// extra.cantidad, where every other zero reads 0.
func (v Value) Float() float64 {
	if v.Kind() != KindNumber {
		return 0
	}
	f, _ := strconv.ParseFloat(v.d.text(v.node()), 64)
	if f == 0 {
		return 0
	}
	return f
}

// Time returns a string holding a timestamp with a zone inside the API's
// range (see Timestamp and ParseInstant) as a UTC time.Time; the zero
// time.Time for anything else.
func (v Value) Time() time.Time {
	t, _ := ParseInstant(v.String())
	return t
}

// Any converts v to plain Go values the way encoding/json would decode it,
// except that numbers become json.Number holding the literal as written:
// nil (null or absent), bool, json.Number, string, []any, map[string]any.
func (v Value) Any() any {
	switch v.Kind() {
	case KindBool:
		return v.Bool()
	case KindNumber:
		return json.Number(v.NumberText())
	case KindString:
		return v.String()
	case KindArray:
		out := make([]any, 0, v.Len())
		for _, it := range v.Items() {
			out = append(out, it.Any())
		}
		return out
	case KindObject:
		out := make(map[string]any, v.Len())
		for k, m := range v.Members() {
			out[k] = m.Any()
		}
		return out
	}
	return nil
}

// MaxEchoValues bounds the values a violation's input holds: the input
// itself, then the items and members inside it in document order, longer
// arrays and objects cut to what fits. Echoed whole, a batch of 500,001
// cliente_ref (one too many) sent its 65 MB back and an unknown member
// holding an 88 MB array its 88 MB, each in over 5 s with the process
// near 500 MB, while another tenant's decisions took up to 1.2 s instead
// of 4 ms; cut, 4 KB and 8 KB in 1.3 s and 1.1 s, decisions under 20 ms.
// The violation's msg and ctx keep the full length.
const MaxEchoValues = 32

// echo is Any for a violation's input, holding at most MaxEchoValues
// values (see there).
func (v Value) echo() any {
	budget := MaxEchoValues
	return v.echoWithin(&budget)
}

func (v Value) echoWithin(budget *int) any {
	*budget--
	switch v.Kind() {
	case KindArray:
		out := make([]any, 0, min(v.Len(), max(*budget, 0)))
		for _, it := range v.Items() {
			if *budget <= 0 {
				break
			}
			out = append(out, it.echoWithin(budget))
		}
		return out
	case KindObject:
		out := make(map[string]any, min(v.Len(), max(*budget, 0)))
		for k, m := range v.Members() {
			if *budget <= 0 {
				break
			}
			out[k] = m.echoWithin(budget)
		}
		return out
	}
	return v.Any()
}

// AppendJSON appends v's canonical JSON to dst and returns the extended
// buffer. Two documents with the same content give the same bytes:
//
//   - compact, no insignificant whitespace;
//   - object members sorted by name, byte-wise on their UTF-8 form;
//   - strings as UTF-8 with only ", \ and control characters escaped
//     (\b \t \n \f \r, \u00XX for the others), as in RFC 8785;
//   - numbers as their exact value in the shortest spelling, never through
//     a float: no exponent for integers of up to 21 digits, for numbers
//     with a fraction and an integer digit, and down to 0.000001; an
//     ECMAScript-style exponent otherwise (1e+21, 1.5e-7). So 100, 1e2 and
//     100.00 are all 100, 10.50 is 10.5, -0 is 0.
//
// The absent Value renders as null.
func (v Value) AppendJSON(dst []byte) []byte { return v.appendJSON(dst, nil) }

// spillSize is how much canonical JSON WriteTo buffers before it writes.
const spillSize = 64 << 10

// spill is where WriteTo empties its buffer between array items and
// object members (see appendJSON).
type spill struct {
	w   io.Writer
	n   int64
	err error
}

// flush writes dst to the spill's writer once it holds spillSize bytes
// and returns the buffer to append to next.
func (sp *spill) flush(dst []byte, force bool) []byte {
	if sp == nil || len(dst) < spillSize && !force {
		return dst
	}
	if sp.err == nil {
		n, err := sp.w.Write(dst)
		sp.n, sp.err = sp.n+int64(n), err
	}
	return dst[:0]
}

// WriteTo writes v's canonical JSON (AppendJSON's bytes) to w with a
// buffer of about spillSize, not a copy of the whole document: a body of
// tens of megabytes is hashed in constant memory.
func (v Value) WriteTo(w io.Writer) (int64, error) {
	sp := &spill{w: w}
	buf := v.appendJSON(make([]byte, 0, 2*spillSize), sp)
	sp.flush(buf, true)
	return sp.n, sp.err
}

// appendJSON is AppendJSON, handing the buffer to sp (when not nil)
// between array items and object members.
func (v Value) appendJSON(dst []byte, sp *spill) []byte {
	switch v.Kind() {
	case KindAbsent, KindNull:
		return append(dst, "null"...)
	case KindBool:
		if v.Bool() {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case KindNumber:
		return canonicalNumber(dst, v.NumberText())
	case KindString:
		return appendString(dst, v.String())
	case KindArray:
		dst = append(dst, '[')
		for i, it := range v.Items() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = sp.flush(it.appendJSON(dst, sp), false)
		}
		return append(dst, ']')
	}
	// Object: sort member indices by key. Small objects sort on the stack.
	n := v.node()
	var small [16]int32
	idx := small[:0]
	if n.n > int32(len(small)) {
		idx = make([]int32, 0, n.n)
	}
	j := v.i + 1
	for range n.n {
		idx = append(idx, j)
		j = v.d.nodes[j].end
	}
	slices.SortFunc(idx, func(a, b int32) int {
		return cmp.Compare(v.d.key(&v.d.nodes[a]), v.d.key(&v.d.nodes[b]))
	})
	dst = append(dst, '{')
	for k, c := range idx {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, v.d.key(&v.d.nodes[c]))
		dst = append(dst, ':')
		dst = sp.flush(Value{v.d, c}.appendJSON(dst, sp), false)
	}
	return append(dst, '}')
}

// JSON returns v's canonical JSON (see AppendJSON) in a new slice.
func (v Value) JSON() []byte { return v.AppendJSON(nil) }

// MarshalJSON implements json.Marshaler with the canonical JSON.
func (v Value) MarshalJSON() ([]byte, error) { return v.AppendJSON(nil), nil }

const hexDigits = "0123456789abcdef"

// appendString appends s (valid UTF-8) as a JSON string, escaping only ",
// \ and control characters.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// runeCount is utf8.RuneCountInString with an ASCII fast path.
func runeCount(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return i + utf8.RuneCountInString(s[i:])
		}
	}
	return len(s)
}
