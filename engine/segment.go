package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Segment is a parsed batch segment filter (field segmento of a batch
// request). The grammar, in JSON:
//
//	segment := {"todos": true}                       only at the top: all customers with history
//	         | {"<op>": {"<feature>": number}}       op: <, <=, >, >=, ==, !=
//	         | {"y": [segment, ...]}                 all of them (at least one item)
//	         | {"o": [segment, ...]}                 any of them (at least one item)
//	         | {"no": segment}                       not
//
// Each object holds exactly one operator, and a comparison exactly one
// feature. Features are the numeric ones of FeatureDocs (an unknown name is
// an error), including "cuota_categoria:<clave>". A Segment is immutable and
// safe for concurrent use.
type Segment struct {
	todos bool
	root  segNode
}

// Limits of a segment: nesting depth (the top object is depth 1), number
// of objects, and size of its JSON text in bytes. The size limit lets
// ParseSegmentJSON refuse a huge segment before decoding it (decoded, a
// list of numbers takes some 140 times its size in memory); it admits
// SegmentMaxNodes conditions naming categories of 200 characters.
const (
	SegmentMaxDepth = 32
	SegmentMaxNodes = 1000
	SegmentMaxBytes = 256 << 10
)

// segMaxViolations bounds the violations one SegmentError reports.
const segMaxViolations = 50

type segOp uint8

const (
	segLT segOp = iota + 1
	segLE
	segGT
	segGE
	segEQ
	segNE
	segAnd
	segOr
	segNot
)

// segComparison returns the comparison operator spelled k.
func segComparison(k string) (segOp, bool) {
	switch k {
	case "<":
		return segLT, true
	case "<=":
		return segLE, true
	case ">":
		return segGT, true
	case ">=":
		return segGE, true
	case "==":
		return segEQ, true
	case "!=":
		return segNE, true
	}
	return 0, false
}

type segNode struct {
	op      segOp
	feature string  // comparisons
	idx     int     // comparisons: index in featureDefs, or -1 for a category share
	cat     string  // idx -1: the category
	value   float64 // comparisons
	kids    []segNode
}

// SegmentViolation is one problem of a segment, shaped for a 422
// HTTPValidationError item.
type SegmentViolation struct {
	// Loc is the path of the failing element, starting with "segmento":
	// object keys as strings, array positions as ints. For an unknown feature
	// it ends at the operator, e.g. ["segmento", "y", 1, "<="].
	Loc []any
	// Type is the pydantic v2 error type: dict_type, list_type, bool_type,
	// float_type, finite_number, too_short, extra_forbidden (unknown
	// operator), value_error (unknown feature, wrong number of keys, depth or
	// size limits, todos not true or not at the top), json_invalid.
	Type string
	Msg  string
	// Feature is the feature name concerned, if any.
	Feature string
	// Input is the offending value as it was given.
	Input any
	// Ctx is pydantic v2's ctx of Type, when it has one (too_short:
	// field_type, min_length, actual_length); nil otherwise.
	Ctx map[string]any
}

// Path is Loc joined by dots, e.g. "segmento.y.1.<=".
func (v *SegmentViolation) Path() string {
	var b strings.Builder
	for i, p := range v.Loc {
		if i > 0 {
			b.WriteByte('.')
		}
		fmt.Fprint(&b, p)
	}
	return b.String()
}

// SegmentError is the error of ParseSegment and ParseSegmentJSON: every
// violation found (at least one, at most 50), in document order.
type SegmentError struct {
	Violations []SegmentViolation
}

func (e *SegmentError) Error() string {
	v := &e.Violations[0]
	s := "engine: " + v.Path() + ": " + v.Msg
	if n := len(e.Violations) - 1; n > 0 {
		s += fmt.Sprintf(" (y %d errores más)", n)
	}
	return s
}

// ParseSegment parses a segment decoded by encoding/json into an any
// (map[string]any, []any, float64 or json.Number, bool; Go integer and
// float types are accepted too). Errors are *SegmentError.
func ParseSegment(v any) (*Segment, error) {
	p := segParser{}
	root := p.node(v, []any{"segmento"}, 1)
	if p.nodes > SegmentMaxNodes {
		p.add([]any{"segmento"}, "value_error", fmt.Sprintf("el segmento tiene demasiadas condiciones (máximo %d)", SegmentMaxNodes), "", nil)
	}
	if len(p.errs) > 0 {
		return nil, &SegmentError{Violations: p.errs}
	}
	return &Segment{todos: p.todos, root: root}, nil
}

// ParseSegmentJSON parses a segment from its JSON text (numbers are read
// exactly as json.Number). Invalid JSON is a violation of type json_invalid;
// a text longer than SegmentMaxBytes is one value_error, found before the
// text is decoded. Errors are *SegmentError.
func ParseSegmentJSON(b []byte) (*Segment, error) {
	if len(b) > SegmentMaxBytes {
		return nil, &SegmentError{Violations: []SegmentViolation{{
			Loc: []any{"segmento"}, Type: "value_error",
			Msg: fmt.Sprintf("el segmento es demasiado grande (máximo %d bytes de JSON)", SegmentMaxBytes),
		}}}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("datos después del segmento")
		}
	}
	if err != nil {
		return nil, &SegmentError{Violations: []SegmentViolation{{
			Loc: []any{"segmento"}, Type: "json_invalid", Msg: "JSON inválido: " + err.Error(),
		}}}
	}
	return ParseSegment(v)
}

// Todos reports whether s is {"todos":true}: every customer with history.
// Callers can then skip Match.
func (s *Segment) Todos() bool { return s.todos }

// Match reports whether the customer with features f is in the segment at
// now (the tenant clock). A nil f is a customer without history. Todos
// matches every f: which customers "have history" is for the caller that
// lists them to decide.
func (s *Segment) Match(f *Features, now time.Time) bool {
	if s.todos {
		return true
	}
	if f == nil {
		f = &Features{}
	}
	sum := f.summarize(now)
	return s.root.eval(&sum)
}

func (n *segNode) eval(s *featSummary) bool {
	switch n.op {
	case segAnd:
		for i := range n.kids {
			if !n.kids[i].eval(s) {
				return false
			}
		}
		return true
	case segOr:
		for i := range n.kids {
			if n.kids[i].eval(s) {
				return true
			}
		}
		return false
	case segNot:
		return !n.kids[0].eval(s)
	}
	var x float64
	if n.idx >= 0 {
		x = s.value(featureDefs[n.idx].id)
	} else {
		x = s.categoryShare(n.cat)
	}
	switch n.op {
	case segLT:
		return x < n.value
	case segLE:
		return x <= n.value
	case segGT:
		return x > n.value
	case segGE:
		return x >= n.value
	case segEQ:
		return x == n.value
	case segNE:
		return x != n.value
	}
	return false
}

type segParser struct {
	errs  []SegmentViolation
	nodes int
	todos bool
}

func (p *segParser) add(loc []any, typ, msg, feature string, input any) {
	p.addV(SegmentViolation{Loc: loc, Type: typ, Msg: msg, Feature: feature, Input: input})
}

// addV records v unless segMaxViolations are recorded already.
func (p *segParser) addV(v SegmentViolation) {
	if len(p.errs) < segMaxViolations {
		p.errs = append(p.errs, v)
	}
}

// segLoc returns loc extended by k, in a fresh slice (violations keep theirs).
func segLoc(loc []any, k any) []any {
	return append(loc[:len(loc):len(loc)], k)
}

const segOperators = "todos, y, o, no, <, <=, >, >=, ==, !="

func (p *segParser) node(v any, loc []any, depth int) segNode {
	p.nodes++
	if depth > SegmentMaxDepth {
		p.add(loc, "value_error", fmt.Sprintf("el segmento está anidado demasiado (máximo %d niveles)", SegmentMaxDepth), "", nil)
		return segNode{}
	}
	if p.nodes > SegmentMaxNodes {
		return segNode{} // reported once by ParseSegment
	}
	m, ok := v.(map[string]any)
	if !ok {
		p.add(loc, "dict_type", "Input should be a valid dictionary", "", v)
		return segNode{}
	}
	if len(m) != 1 {
		p.add(loc, "value_error", "cada objeto del segmento lleva exactamente un operador ("+segOperators+")", "", v)
		return segNode{}
	}
	for k, arg := range m {
		kloc := segLoc(loc, k)
		switch k {
		case "todos":
			if depth != 1 {
				p.add(kloc, "value_error", "todos solo puede ir en la raíz del segmento", "", arg)
				return segNode{}
			}
			b, isBool := arg.(bool)
			switch {
			case !isBool:
				p.add(kloc, "bool_type", "Input should be a valid boolean", "", arg)
			case !b:
				p.add(kloc, "value_error", "todos solo admite true", "", arg)
			default:
				p.todos = true
			}
			return segNode{}
		case "y", "o":
			items, isList := arg.([]any)
			if !isList {
				p.add(kloc, "list_type", "Input should be a valid list", "", arg)
				return segNode{}
			}
			if len(items) == 0 {
				p.addV(SegmentViolation{Loc: kloc, Type: "too_short", Msg: "List should have at least 1 item after validation, not 0",
					Input: arg, Ctx: map[string]any{"field_type": "List", "min_length": 1, "actual_length": 0}})
				return segNode{}
			}
			n := segNode{op: segAnd, kids: make([]segNode, 0, len(items))}
			if k == "o" {
				n.op = segOr
			}
			for i, it := range items {
				n.kids = append(n.kids, p.node(it, segLoc(kloc, i), depth+1))
			}
			return n
		case "no":
			return segNode{op: segNot, kids: []segNode{p.node(arg, kloc, depth+1)}}
		}
		op, isCmp := segComparison(k)
		if !isCmp {
			p.add(kloc, "extra_forbidden", fmt.Sprintf("operador desconocido %q; se espera uno de: %s", k, segOperators), "", arg)
			return segNode{}
		}
		return p.comparison(op, arg, kloc)
	}
	return segNode{}
}

func (p *segParser) comparison(op segOp, arg any, loc []any) segNode {
	m, ok := arg.(map[string]any)
	if !ok {
		p.add(loc, "dict_type", "Input should be a valid dictionary", "", arg)
		return segNode{}
	}
	if len(m) != 1 {
		p.add(loc, "value_error", "una comparación lleva exactamente una característica, p. ej. {\"<=\":{\"recencia_dias\":30}}", "", arg)
		return segNode{}
	}
	for name, val := range m {
		n := segNode{op: op, feature: name, idx: featureIndex(name)}
		if n.idx < 0 {
			if !validFeature(name) {
				p.add(loc, "value_error", "característica desconocida: "+name, name, arg)
				return segNode{}
			}
			n.cat = strings.TrimPrefix(name, FeatureCategoryShare)
		}
		x, ok := segNumber(val)
		switch {
		case !ok:
			p.add(segLoc(loc, name), "float_type", "Input should be a valid number", name, val)
		case math.IsNaN(x) || math.IsInf(x, 0):
			p.add(segLoc(loc, name), "finite_number", "Input should be a finite number", name, val)
		}
		n.value = x
		return n
	}
	return segNode{}
}

// segNumber converts the numbers encoding/json and Go code produce: a
// json.Number that parses as a float64 (one beyond its range is ±Inf, for
// the finite_number check), or a value of one of Go's predeclared integer
// and float types (not a defined type over one, nor uintptr or a complex
// number).
func segNumber(v any) (float64, bool) {
	if n, ok := v.(json.Number); ok {
		f, err := strconv.ParseFloat(string(n), 64)
		return f, err == nil || (errors.Is(err, strconv.ErrRange) && math.IsInf(f, 0))
	}
	r := reflect.ValueOf(v)
	if !r.IsValid() || r.Type().PkgPath() != "" {
		return 0, false
	}
	switch r.Kind() {
	case reflect.Float32, reflect.Float64:
		return r.Float(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(r.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(r.Uint()), true
	}
	return 0, false
}
