package schema

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects Parse accepts. It
// bounds the parser's recursion (and every recursive walk of a Value).
const MaxDepth = 64

// Kind is the JSON type of a Value.
type Kind uint8

// The kinds of Value. KindAbsent is the kind of the zero Value, which stands
// for a member or element that is not there.
const (
	KindAbsent Kind = iota
	KindNull
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// String returns the kind's name ("absent", "null", "boolean", "number",
// "string", "array", "object").
func (k Kind) String() string {
	switch k {
	case KindAbsent:
		return "absent"
	case KindNull:
		return "null"
	case KindBool:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindArray:
		return "array"
	case KindObject:
		return "object"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// node flags.
const (
	flagKeyEsc = 1 << iota // the member key lives in doc.esc
	flagValEsc             // the string value lives in doc.esc
	flagTrue               // a boolean that is true
)

// node is one JSON value. Nodes are stored in preorder: a container's
// children follow it, and end is the index of the first node after its
// subtree, so siblings are found by following end.
type node struct {
	kind   Kind
	flags  uint8
	keyOff int32 // member key span (in src, or in esc with flagKeyEsc)
	keyLen int32
	off    int32 // scalars: text span (strings without their quotes, decoded); containers: source offset
	n      int32 // scalars: text length; containers: number of children
	end    int32
}

// doc is one parsed document. It owns a copy of the input, so a Value never
// aliases the caller's buffer.
type doc struct {
	src   string // the input, copied
	esc   string // decoded text of strings and keys that had escapes
	nodes []node
}

func (d *doc) key(n *node) string {
	if n.flags&flagKeyEsc != 0 {
		return d.esc[n.keyOff : n.keyOff+n.keyLen]
	}
	return d.src[n.keyOff : n.keyOff+n.keyLen]
}

func (d *doc) text(n *node) string {
	if n.flags&flagValEsc != 0 {
		return d.esc[n.off : n.off+n.n]
	}
	return d.src[n.off : n.off+n.n]
}

// SyntaxError is why Parse refused its input: Offset is the byte offset at
// which the problem was found, Msg says what it is in a few words.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return "invalid JSON at offset " + strconv.Itoa(e.Offset) + ": " + e.Msg
}

// Violation returns e as a json_invalid validation error, the way FastAPI
// reports a body it cannot decode: loc is root followed by the byte offset,
// msg "JSON decode error", ctx {"error": e.Msg} and input {}.
func (e *SyntaxError) Violation(root ...any) Violation {
	loc := make([]any, 0, len(root)+1)
	loc = append(append(loc, root...), e.Offset)
	return Violation{
		Loc:   loc,
		Msg:   "JSON decode error",
		Type:  "json_invalid",
		Ctx:   map[string]any{"error": e.Msg},
		Input: map[string]any{},
	}
}

// Parse parses one JSON value that must fill data (surrounding whitespace
// aside). It refuses, with a *SyntaxError:
//
//   - anything RFC 8259 does not allow, including a byte order mark;
//   - invalid UTF-8 anywhere, and \u escapes that leave a lone surrogate;
//   - an object with two members of the same name (after unescaping);
//   - anything after the value ("Extra data");
//   - nesting deeper than MaxDepth, and inputs of 2 GiB or more.
//
// Parse copies data: the caller may reuse it once Parse returns. The error
// is nil or a *SyntaxError.
func Parse(data []byte) (Value, error) {
	if len(data) >= math.MaxInt32 {
		return Value{}, &SyntaxError{Offset: 0, Msg: "document too large"}
	}
	p := parser{data: data}
	// Every value but the first is preceded by a ',' or opens a container,
	// so this count bounds the number of nodes: the slice never grows.
	p.nodes = make([]node, 0, 1+bytes.Count(data, []byte{','})+bytes.Count(data, []byte{'['})+bytes.Count(data, []byte{'{'}))
	p.skipSpace()
	if !p.value(0) {
		return Value{}, p.err
	}
	p.skipSpace()
	if p.pos < len(data) {
		return Value{}, &SyntaxError{Offset: p.pos, Msg: "Extra data"}
	}
	d := &doc{src: string(data), nodes: p.nodes}
	if len(p.esc) > 0 {
		d.esc = string(p.esc)
	}
	return Value{d: d, i: 0}, nil
}

type parser struct {
	data  []byte
	pos   int
	nodes []node
	esc   []byte
	err   *SyntaxError
}

func (p *parser) fail(at int, msg string) bool {
	p.err = &SyntaxError{Offset: at, Msg: msg}
	return false
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses the value at p.pos (whitespace already skipped) and appends
// its nodes. depth is the nesting of the containers around it.
func (p *parser) value(depth int) bool {
	if p.pos >= len(p.data) {
		return p.fail(p.pos, "Expecting value")
	}
	switch c := p.data[p.pos]; c {
	case '{':
		return p.object(depth + 1)
	case '[':
		return p.array(depth + 1)
	case '"':
		idx := len(p.nodes)
		p.nodes = append(p.nodes, node{kind: KindString})
		off, n, esc, ok := p.str()
		if !ok {
			return false
		}
		nd := &p.nodes[idx]
		nd.off, nd.n, nd.end = off, n, int32(idx+1)
		if esc {
			nd.flags |= flagValEsc
		}
		return true
	case 't':
		return p.literal("true", node{kind: KindBool, flags: flagTrue})
	case 'f':
		return p.literal("false", node{kind: KindBool})
	case 'n':
		return p.literal("null", node{kind: KindNull})
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return p.number()
		}
		return p.fail(p.pos, "Expecting value")
	}
}

func (p *parser) literal(word string, n node) bool {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.fail(p.pos, "Expecting value")
	}
	n.off, n.n = int32(p.pos), int32(len(word))
	n.end = int32(len(p.nodes) + 1)
	p.nodes = append(p.nodes, n)
	p.pos += len(word)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and keeps its
// text.
func (p *parser) number() bool {
	d, start := p.data, p.pos
	i := start
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return p.fail(start, "Expecting value")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return p.fail(i, "Invalid number: expecting digit after '.'")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return p.fail(i, "Invalid number: expecting exponent digits")
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	p.nodes = append(p.nodes, node{kind: KindNumber, off: int32(start), n: int32(i - start), end: int32(len(p.nodes) + 1)})
	p.pos = i
	return true
}

// str scans the string whose opening quote is at p.pos. Without escapes the
// text is the span (off, n) of src; with escapes it is decoded into p.esc and
// (off, n) is its span there.
func (p *parser) str() (off, n int32, escaped, ok bool) {
	d := p.data
	start := p.pos + 1
	for i := start; i < len(d); {
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return int32(start), int32(i - start), false, true
		case c == '\\':
			return p.strEscaped(start, i)
		case c < 0x20:
			return 0, 0, false, p.fail(i, "Invalid control character in string")
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, 0, false, p.fail(i, "Invalid UTF-8")
			}
			i += size
		}
	}
	return 0, 0, false, p.fail(start-1, "Unterminated string")
}

// strEscaped continues str from the first backslash at i, decoding into
// p.esc.
func (p *parser) strEscaped(start, i int) (off, n int32, escaped, ok bool) {
	d := p.data
	escStart := len(p.esc)
	p.esc = append(p.esc, d[start:i]...)
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return int32(escStart), int32(len(p.esc) - escStart), true, true
		case c == '\\':
			if i+1 >= len(d) {
				return 0, 0, false, p.fail(start-1, "Unterminated string")
			}
			switch e := d[i+1]; e {
			case '"', '\\', '/':
				p.esc = append(p.esc, e)
			case 'b':
				p.esc = append(p.esc, '\b')
			case 'f':
				p.esc = append(p.esc, '\f')
			case 'n':
				p.esc = append(p.esc, '\n')
			case 'r':
				p.esc = append(p.esc, '\r')
			case 't':
				p.esc = append(p.esc, '\t')
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return 0, 0, false, p.fail(i, "Invalid \\uXXXX escape")
				}
				width := 6
				if r >= 0xD800 && r < 0xE000 {
					lo, ok := rune(0), false
					if r < 0xDC00 && i+11 < len(d) && d[i+6] == '\\' && d[i+7] == 'u' {
						lo, ok = hex4(d, i+8)
					}
					if !ok || lo < 0xDC00 || lo >= 0xE000 {
						return 0, 0, false, p.fail(i, "Invalid \\uXXXX escape: lone surrogate")
					}
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					width = 12
				}
				p.esc = utf8.AppendRune(p.esc, r)
				i += width
				continue
			default:
				return 0, 0, false, p.fail(i, "Invalid \\escape")
			}
			i += 2
		case c < 0x20:
			return 0, 0, false, p.fail(i, "Invalid control character in string")
		case c < utf8.RuneSelf:
			p.esc = append(p.esc, c)
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, 0, false, p.fail(i, "Invalid UTF-8")
			}
			p.esc = append(p.esc, d[i:i+size]...)
			i += size
		}
	}
	return 0, 0, false, p.fail(start-1, "Unterminated string")
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (p *parser) array(depth int) bool {
	idx, empty, ok := p.open(KindArray, ']', depth)
	if !ok {
		return false
	}
	var count int32
	for more := !empty; more; {
		if !p.value(depth) {
			return false
		}
		count++
		if more, ok = p.next(']'); !ok {
			return false
		}
	}
	return p.closeNode(idx, count)
}

// open starts the node of a container (an array or object) at its opening
// bracket and skips the bracket; empty says the container closes at once,
// its closing bracket skipped too.
func (p *parser) open(kind Kind, closing byte, depth int) (idx int, empty, ok bool) {
	if depth > MaxDepth {
		return 0, false, p.fail(p.pos, "Nesting deeper than "+strconv.Itoa(MaxDepth))
	}
	idx = len(p.nodes)
	p.nodes = append(p.nodes, node{kind: kind, off: int32(p.pos)})
	p.pos++
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == closing {
		p.pos++
		return idx, true, true
	}
	return idx, false, true
}

// next reads what follows a container's member: the closing bracket ends
// the container (more false), a comma announces another member.
func (p *parser) next(closing byte) (more, ok bool) {
	p.skipSpace()
	if p.pos < len(p.data) {
		switch p.data[p.pos] {
		case closing:
			p.pos++
			return false, true
		case ',':
			p.pos++
			p.skipSpace()
			return true, true
		}
	}
	return false, p.fail(p.pos, "Expecting ',' delimiter")
}

// closeNode ends the container node idx, which has count members.
func (p *parser) closeNode(idx int, count int32) bool {
	p.nodes[idx].n = count
	p.nodes[idx].end = int32(len(p.nodes))
	return true
}

// smallObject is the member count up to which duplicate keys are found by
// comparing with every earlier member; bigger objects use a set.
const smallObject = 16

func (p *parser) object(depth int) bool {
	idx, empty, ok := p.open(KindObject, '}', depth)
	if !ok {
		return false
	}
	var count int32
	var seen map[string]struct{}
	for more := !empty; more; {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return p.fail(p.pos, "Expecting property name enclosed in double quotes")
		}
		keyAt := p.pos
		koff, klen, kesc, ok := p.str()
		if !ok {
			return false
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return p.fail(p.pos, "Expecting ':' delimiter")
		}
		p.pos++
		p.skipSpace()
		vi := len(p.nodes)
		if !p.value(depth) {
			return false
		}
		vn := &p.nodes[vi]
		vn.keyOff, vn.keyLen = koff, klen
		if kesc {
			vn.flags |= flagKeyEsc
		}
		if !p.uniqueKey(idx, vi, count, keyAt, &seen) {
			return false
		}
		count++
		if more, ok = p.next('}'); !ok {
			return false
		}
	}
	return p.closeNode(idx, count)
}

// uniqueKey fails at keyAt when the key of member node vi of object idx
// (its count-th member) repeats an earlier member's: by comparing with each
// while the object is small, then with the set seen, built on first use.
func (p *parser) uniqueKey(idx, vi int, count int32, keyAt int, seen *map[string]struct{}) bool {
	key := p.keyBytes(&p.nodes[vi])
	if count < smallObject {
		for j := int32(idx + 1); j < int32(vi); j = p.nodes[j].end {
			if string(p.keyBytes(&p.nodes[j])) == string(key) {
				return p.fail(keyAt, "Duplicate key "+strconv.Quote(string(key)))
			}
		}
		return true
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*smallObject)
		for j := int32(idx + 1); j < int32(vi); j = p.nodes[j].end {
			(*seen)[string(p.keyBytes(&p.nodes[j]))] = struct{}{}
		}
	}
	if _, dup := (*seen)[string(key)]; dup {
		return p.fail(keyAt, "Duplicate key "+strconv.Quote(string(key)))
	}
	(*seen)[string(key)] = struct{}{}
	return true
}

// keyBytes is a member's decoded key while parsing (before doc exists).
func (p *parser) keyBytes(n *node) []byte {
	if n.flags&flagKeyEsc != 0 {
		return p.esc[n.keyOff : n.keyOff+n.keyLen]
	}
	return p.data[n.keyOff : n.keyOff+n.keyLen]
}
