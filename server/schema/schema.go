package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Schema describes the JSON a value must be. The implementations are the
// types built by String, ID, ClienteRef, Int, Number, Money, Bool,
// Timestamp, URL, Array, Object, AnyObject and Any; all are immutable once
// built. A JSON null is refused (with the type's own "valid X" violation)
// unless the schema is Nullable.
type Schema interface {
	check(c *checker, v Value)
	jsonSchema() map[string]any // see JSONSchema
}

// Validate checks v against s and returns every violation found, or nil,
// listing at most MaxViolations of them (see there). Each violation's Loc
// starts with root. An absent v is reported as missing
// at root. Per value at most one violation is reported (the first failing
// rule, in the order the schema types document); objects and arrays go on to
// report every member and element. Within an object, violations follow the
// schema's field order; unknown members (extra_forbidden) come after, in
// document order.
func Validate(s Schema, v Value, root ...any) []Violation {
	var k Checker
	return k.Validate(s, v, root...)
}

// Checker is Validate with memory reused from one call to the next: a
// caller that validates many values in a row (the events of a request)
// keeps one and saves an allocation per value. The zero Checker is ready
// to use; it is not safe for concurrent use.
type Checker struct{ c checker }

// Validate is the package's Validate. The violations it returns are the
// caller's; c keeps no reference to them.
func (k *Checker) Validate(s Schema, v Value, root ...any) []Violation {
	c := &k.c
	c.path, c.out, c.found = c.pathBuf[:0], nil, 0
	if len(root) <= len(c.rootBuf) {
		c.root = c.rootBuf[:copy(c.rootBuf[:], root)]
	} else {
		c.root = slices.Clone(root)
	}
	if !v.Present() {
		c.add(Value{}, "missing", "Field required", nil)
		return c.out
	}
	s.check(c, v)
	if c.found > len(c.out) {
		c.out = append(c.out, Violation{
			Loc:  slices.Clone(c.root),
			Msg:  "Value error, se listan los primeros " + strconv.Itoa(MaxViolations) + " de " + strconv.Itoa(c.found) + " errores",
			Type: "value_error",
			Ctx:  map[string]any{"max_errors": MaxViolations, "errors": c.found},
		})
	}
	return c.out
}

// MaxViolations bounds the violations one Validate lists. Past it the rest
// are counted, not listed, and one last value_error at the root says how
// many there were. Unbounded, a 2 MB batch of 500,000 one-character
// cliente_ref drew a 72 MB 422 in 16 s, and 500,000 of 185 characters
// (94 MB) a 165 MB one in 46 s with the process at 885 MB resident, while
// another tenant's decisions took up to 250 ms instead of 4; bounded, 14 KB
// in 1.8 s and 33 KB in 5.8 s at 265 MB. A body that breaks more rules than
// this is fixed by its first ones.
const MaxViolations = 100

// checker collects violations during one Validate.
type checker struct {
	root []any
	path []pathElem
	out  []Violation
	// found counts every violation, listed in out or not (MaxViolations).
	found int
	// The root is copied so that Validate's variadic argument stays on the
	// caller's stack; the path rarely outgrows its buffer.
	rootBuf [4]any
	pathBuf [8]pathElem
}

// pathElem is a member name, or an array index when idx >= 0.
type pathElem struct {
	key string
	idx int
}

func (c *checker) pushKey(k string) { c.path = append(c.path, pathElem{key: k, idx: -1}) }
func (c *checker) pushIdx(i int)    { c.path = append(c.path, pathElem{idx: i}) }
func (c *checker) pop()             { c.path = c.path[:len(c.path)-1] }

func (c *checker) loc() []any {
	loc := make([]any, 0, len(c.root)+len(c.path))
	loc = append(loc, c.root...)
	for _, e := range c.path {
		if e.idx >= 0 {
			loc = append(loc, e.idx)
		} else {
			loc = append(loc, e.key)
		}
	}
	return loc
}

// add records a violation at the current path with v as its input; past
// MaxViolations it only counts it.
func (c *checker) add(v Value, typ, msg string, ctx map[string]any) {
	c.found++
	if len(c.out) >= MaxViolations {
		return
	}
	var input any
	switch v.Kind() {
	case KindAbsent:
	case KindNull:
		input = JSONNull{}
	default:
		input = v.echo()
	}
	c.out = append(c.out, Violation{Loc: c.loc(), Msg: msg, Type: typ, Ctx: ctx, Input: input})
}

// typed reports whether v is to be checked further: it is not a null the
// schema allows, and it is of kind k, else typ and msg are recorded.
func (c *checker) typed(v Value, nullable bool, k Kind, typ, msg string) bool {
	if nullable && v.IsNull() {
		return false
	}
	if v.Kind() != k {
		c.add(v, typ, msg, nil)
		return false
	}
	return true
}

// derive returns a copy of schema s changed by set: the builder methods
// never change a schema another one was built from.
func derive[S any](s *S, set func(c *S)) *S {
	c := *s
	set(&c)
	return &c
}

func (c *checker) geViolation(v Value, bound any, text string) {
	c.add(v, "greater_than_equal", "Input should be greater than or equal to "+text, map[string]any{"ge": bound})
}

func (c *checker) leViolation(v Value, bound any, text string) {
	c.add(v, "less_than_equal", "Input should be less than or equal to "+text, map[string]any{"le": bound})
}

// ---- strings ----

// StringSchema is a JSON string. Rules are checked in this order and the
// first that fails is reported:
//
//	not a string       string_type
//	Len min            string_too_short   ctx {"min_length": n}
//	Len max            string_too_long    ctx {"max_length": n}
//	Pattern            string_pattern_mismatch ctx {"pattern": expr}
//	Enum               enum               ctx {"expected": "'a' or 'b'"}
//	control character  value_error        any but tab and newline (contract §8)
//	Check              value_error        "Value error, " + the check's message
//
// Lengths count Unicode code points, as pydantic does. Control characters
// are Unicode's Cc: U+0000–U+001F, U+007F and U+0080–U+009F.
type StringSchema struct {
	min, max int // max < 0: no maximum
	pattern  string
	match    func(string) bool
	enum     []string
	expected string // enum rendered as pydantic does
	checks   []func(string) string
	nullable bool
	doc      string // description in JSON Schema
}

// String is a string schema with no rules yet.
func String() *StringSchema { return &StringSchema{max: -1} }

// Len bounds the length in characters to [min, max]; max < 0 means no
// maximum.
func (s *StringSchema) Len(min, max int) *StringSchema {
	return derive(s, func(c *StringSchema) { c.min, c.max = min, max })
}

// Pattern requires the string to match expr, the pattern named in the
// violation. match does the matching; when nil, expr is compiled with
// regexp (unanchored search, like pydantic; Pattern panics if it does not
// compile), except that IDPatternText uses ValidID.
func (s *StringSchema) Pattern(expr string, match func(string) bool) *StringSchema {
	if match == nil {
		if expr == IDPatternText {
			match = ValidID
		} else {
			match = regexp.MustCompile(expr).MatchString
		}
	}
	return derive(s, func(c *StringSchema) { c.pattern, c.match = expr, match })
}

// Enum requires the string to be one of vals (exactly).
func (s *StringSchema) Enum(vals ...string) *StringSchema {
	return derive(s, func(c *StringSchema) { c.enum = slices.Clone(vals); c.expected = expectedText(vals) })
}

// Check adds a rule: fn returns "" when the string is fine, else the message
// of a value_error. Checks run in the order added, after every other rule.
func (s *StringSchema) Check(fn func(string) string) *StringSchema {
	return derive(s, func(c *StringSchema) { c.checks = append(slices.Clip(c.checks), fn) })
}

// Nullable also accepts null.
func (s *StringSchema) Nullable() *StringSchema {
	return derive(s, func(c *StringSchema) { c.nullable = true })
}

func (s *StringSchema) check(c *checker, v Value) {
	if !c.typed(v, s.nullable, KindString, "string_type", "Input should be a valid string") {
		return
	}
	if typ, msg, ctx := s.rule(v.String()); typ != "" {
		c.add(v, typ, msg, ctx)
	}
}

// controlChar returns the message of a value_error when text holds a
// control character other than tab and newline, "" when it holds none.
func controlChar(text string) string {
	for i := 0; i < len(text); i++ {
		b := text[i]
		switch {
		case b < 0x20 && b != '\t' && b != '\n', b == 0x7f,
			b == 0xc2 && i+1 < len(text) && text[i+1] >= 0x80 && text[i+1] <= 0x9f: // U+0080–U+009F
			r, _ := utf8.DecodeRuneInString(text[i:])
			return fmt.Sprintf("control character U+%04X at character %d: only tab and newline are allowed", r, runeCount(text[:i])+1)
		}
	}
	return ""
}

// rule returns the first rule text breaks, "" when none.
func (s *StringSchema) rule(text string) (typ, msg string, ctx map[string]any) {
	if s.min > 0 || s.max >= 0 {
		n := runeCount(text)
		if n < s.min {
			return "string_too_short", "String should have at least " + plural(s.min, "character"), map[string]any{"min_length": s.min}
		}
		if s.max >= 0 && n > s.max {
			return "string_too_long", "String should have at most " + plural(s.max, "character"), map[string]any{"max_length": s.max}
		}
	}
	if s.match != nil && !s.match(text) {
		return "string_pattern_mismatch", "String should match pattern '" + s.pattern + "'", map[string]any{"pattern": s.pattern}
	}
	if s.enum != nil && !slices.Contains(s.enum, text) {
		return "enum", "Input should be " + s.expected, map[string]any{"expected": s.expected}
	}
	if m := controlChar(text); m != "" {
		return "value_error", "Value error, " + m, nil
	}
	for _, fn := range s.checks {
		if m := fn(text); m != "" {
			return "value_error", "Value error, " + m, nil
		}
	}
	return "", "", nil
}

// ValidateText checks a Go string (a path parameter, header or form field)
// against s as if it were a JSON string at loc. It returns nil or one
// violation.
func (s *StringSchema) ValidateText(text string, loc ...any) []Violation {
	typ, msg, ctx := s.rule(text)
	if typ == "" {
		return nil
	}
	return []Violation{{Loc: slices.Clone(loc), Msg: msg, Type: typ, Ctx: ctx, Input: text}}
}

// expectedText renders choices as pydantic does: 'a', 'b' or 'c'.
func expectedText(vals []string) string {
	var b strings.Builder
	for i, v := range vals {
		switch {
		case i == 0:
		case i == len(vals)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString("'" + v + "'")
	}
	return b.String()
}

// ---- numbers ----

// IntSchema is an integral JSON number. 5.0 and 5e0 are accepted as 5.
//
//	not a number                  int_type
//	a fraction (5.5, 1e-1)        int_from_float
//	below Min                     greater_than_equal ctx {"ge": min}
//	above Max                     less_than_equal    ctx {"le": max}
//
// The bounds are int64; without Min/Max they are the int64 range, so an
// integer that does not fit an int64 is reported against them.
type IntSchema struct {
	min, max int64
	nullable bool
}

// Int is an integer schema bounded only by the int64 range.
func Int() *IntSchema { return &IntSchema{min: math.MinInt64, max: math.MaxInt64} }

// Min sets the smallest value allowed.
func (s *IntSchema) Min(min int64) *IntSchema {
	return derive(s, func(c *IntSchema) { c.min = min })
}

// Max sets the largest value allowed.
func (s *IntSchema) Max(max int64) *IntSchema {
	return derive(s, func(c *IntSchema) { c.max = max })
}

// Range sets both bounds.
func (s *IntSchema) Range(min, max int64) *IntSchema { return s.Min(min).Max(max) }

// Nullable also accepts null.
func (s *IntSchema) Nullable() *IntSchema {
	return derive(s, func(c *IntSchema) { c.nullable = true })
}

func (s *IntSchema) check(c *checker, v Value) {
	c.checkScaled(v, &intScale, s.nullable, s.min, s.max)
}

// scaledRule is what IntSchema and MoneySchema check alike: v is a JSON
// number (else typeType, typeMsg), read exactly as an int64 count of
// 10^-scale units (a finer fraction is reported as fracType, fracMsg),
// within [min, max], a bound reported as bound gives it (its ctx value,
// its text in the message).
type scaledRule struct {
	scale             int64
	typeType, typeMsg string
	fracType, fracMsg string
	bound             func(n int64) (ctx any, text string)
}

// intScale is IntSchema's rule: whole numbers, bounds as int64.
var intScale = scaledRule{
	scale:    0,
	typeType: "int_type", typeMsg: "Input should be a valid integer",
	fracType: "int_from_float", fracMsg: "Input should be a valid integer, got a number with a fractional part",
	bound: func(n int64) (any, string) { return n, strconv.FormatInt(n, 10) },
}

// checkScaled checks v against r and the bounds min and max (in
// 10^-r.scale units), null passing when nullable; it adds at most one
// violation.
func (c *checker) checkScaled(v Value, r *scaledRule, nullable bool, min, max int64) {
	if !c.typed(v, nullable, KindNumber, r.typeType, r.typeMsg) {
		return
	}
	d := readDecimal(v.NumberText())
	n, err := d.scaled(r.scale)
	switch {
	case err == numFraction:
		c.add(v, r.fracType, r.fracMsg, nil)
	case err == numTooSmall || err == numOK && n < min:
		ctx, text := r.bound(min)
		c.geViolation(v, ctx, text)
	case err == numTooBig || err == numOK && n > max:
		ctx, text := r.bound(max)
		c.leViolation(v, ctx, text)
	}
}

// NumberSchema is any finite JSON number, read as a float64.
//
//	not a number          float_type
//	beyond float64        finite_number
//	below Min             greater_than_equal ctx {"ge": min}
//	above Max             less_than_equal    ctx {"le": max}
type NumberSchema struct {
	min, max       float64
	hasMin, hasMax bool
	nullable       bool
}

// Number is a number schema with no bounds.
func Number() *NumberSchema { return &NumberSchema{} }

// Min sets the smallest value allowed.
func (s *NumberSchema) Min(min float64) *NumberSchema {
	return derive(s, func(c *NumberSchema) { c.min, c.hasMin = min, true })
}

// Max sets the largest value allowed.
func (s *NumberSchema) Max(max float64) *NumberSchema {
	return derive(s, func(c *NumberSchema) { c.max, c.hasMax = max, true })
}

// Range sets both bounds.
func (s *NumberSchema) Range(min, max float64) *NumberSchema { return s.Min(min).Max(max) }

// Nullable also accepts null.
func (s *NumberSchema) Nullable() *NumberSchema {
	return derive(s, func(c *NumberSchema) { c.nullable = true })
}

func (s *NumberSchema) check(c *checker, v Value) {
	if !c.typed(v, s.nullable, KindNumber, "float_type", "Input should be a valid number") {
		return
	}
	f := v.Float()
	switch {
	case math.IsInf(f, 0):
		c.add(v, "finite_number", "Input should be a finite number", nil)
	case s.hasMin && f < s.min:
		c.geViolation(v, s.min, strconv.FormatFloat(s.min, 'g', -1, 64))
	case s.hasMax && f > s.max:
		c.leViolation(v, s.max, strconv.FormatFloat(s.max, 'g', -1, 64))
	}
}

// MoneySchema is an amount in MXN: a JSON number with at most two decimals,
// converted to int64 cents exactly from its literal (Value.Cents). The rule
// is on the value, not the spelling: 10.5, 10.55, 10.550 and 1e2 (100.00)
// are accepted; 10.555 and 1e-3 are not.
//
//	not a number                  float_type
//	more than two decimals        value_error "Value error, el monto admite como máximo 2 decimales"
//	below Min                     greater_than_equal ctx {"ge": min in MXN}
//	above Max                     less_than_equal    ctx {"le": max in MXN}
//
// Bounds are given in cents and reported in MXN (as a json.Number); without
// them the bounds are the int64 range of cents.
type MoneySchema struct {
	min, max int64
	nullable bool
}

// moneyDecimalsMessage names the two-decimal rule (contract section 5).
const moneyDecimalsMessage = "el monto admite como máximo 2 decimales (centavos)"

// Money is a money schema bounded only by the int64 range of cents.
func Money() *MoneySchema { return &MoneySchema{min: math.MinInt64, max: math.MaxInt64} }

// Min sets the smallest amount allowed, in cents.
func (s *MoneySchema) Min(minCents int64) *MoneySchema {
	return derive(s, func(c *MoneySchema) { c.min = minCents })
}

// Max sets the largest amount allowed, in cents.
func (s *MoneySchema) Max(maxCents int64) *MoneySchema {
	return derive(s, func(c *MoneySchema) { c.max = maxCents })
}

// Range sets both bounds, in cents: Range(0, 100_000_000_000) is 0 to
// 1,000,000,000 MXN.
func (s *MoneySchema) Range(minCents, maxCents int64) *MoneySchema {
	return s.Min(minCents).Max(maxCents)
}

// Nullable also accepts null.
func (s *MoneySchema) Nullable() *MoneySchema {
	return derive(s, func(c *MoneySchema) { c.nullable = true })
}

func (s *MoneySchema) check(c *checker, v Value) {
	c.checkScaled(v, &moneyScale, s.nullable, s.min, s.max)
}

// moneyScale is MoneySchema's rule: cents, bounds reported in MXN.
var moneyScale = scaledRule{
	scale:    2,
	typeType: "float_type", typeMsg: "Input should be a valid number",
	fracType: "value_error", fracMsg: "Value error, " + moneyDecimalsMessage,
	bound: func(n int64) (any, string) {
		t := centsText(n)
		return json.Number(t), t
	},
}

// ---- other scalars ----

// BoolSchema is true or false (bool_type otherwise; no coercion from 0/1 or
// strings).
type BoolSchema struct{ nullable bool }

// Bool is a boolean schema.
func Bool() *BoolSchema { return &BoolSchema{} }

// Nullable also accepts null.
func (s *BoolSchema) Nullable() *BoolSchema { return &BoolSchema{nullable: true} }

func (s *BoolSchema) check(c *checker, v Value) {
	c.typed(v, s.nullable, KindBool, "bool_type", "Input should be a valid boolean")
}

// TimestampSchema is a string holding an ISO-8601 / RFC 3339 date-time WITH
// its zone (Value.Time gives it in UTC):
//
//	YYYY-MM-DD ( T | t | space ) HH:MM [ :SS [ .fraction ] ] ( Z | z | ±HH:MM | ±HHMM )
//
//	not a string               datetime_type
//	no zone (or a date alone)  timezone_aware     "Input should have timezone info"
//	UTC instant before 1970-01-01 or after 9999-12-31
//	                           value_error        (contract §8)
//	anything else wrong        datetime_parsing   ctx {"error": reason}
type TimestampSchema struct{ nullable bool }

// Timestamp is a timestamp schema.
func Timestamp() *TimestampSchema { return &TimestampSchema{} }

// Nullable also accepts null.
func (s *TimestampSchema) Nullable() *TimestampSchema { return &TimestampSchema{nullable: true} }

func (s *TimestampSchema) check(c *checker, v Value) {
	if !c.typed(v, s.nullable, KindString, "datetime_type", "Input should be a valid datetime") {
		return
	}
	t, reason, noZone := parseTimestamp(v.String())
	switch {
	case reason != "":
		c.add(v, "datetime_parsing", "Input should be a valid datetime, "+reason, map[string]any{"error": reason})
	case noZone:
		c.add(v, "timezone_aware", "Input should have timezone info", nil)
	case !inRange(t):
		c.add(v, "value_error", "Value error, "+rangeMessage, nil)
	}
}

// URLSchema is an absolute URL with a host, as a string of at most 2083
// characters (pydantic's HttpUrl limit):
//
//	not a string        url_type
//	too long            url_too_long  ctx {"max_length": 2083}
//	not a URL           url_parsing   ctx {"error": reason}
//	scheme not allowed  url_scheme    ctx {"expected_schemes": "'https'"}
//
// Whether the host may be contacted (private ranges and the like) is the
// caller's business.
type URLSchema struct {
	schemes  []string
	expected string
	nullable bool
}

// maxURL is pydantic's HttpUrl length limit.
const maxURL = 2083

// URL is a URL schema accepting the given schemes (compared without regard
// to case); none given means "http" and "https".
func URL(schemes ...string) *URLSchema {
	if len(schemes) == 0 {
		schemes = []string{"http", "https"}
	}
	return &URLSchema{schemes: slices.Clone(schemes), expected: expectedText(schemes)}
}

// Nullable also accepts null.
func (s *URLSchema) Nullable() *URLSchema {
	return derive(s, func(c *URLSchema) { c.nullable = true })
}

func (s *URLSchema) check(c *checker, v Value) {
	if !c.typed(v, s.nullable, KindString, "url_type", "URL input should be a string or URL") {
		return
	}
	text := v.String()
	if runeCount(text) > maxURL {
		c.add(v, "url_too_long", "URL should have at most 2083 characters", map[string]any{"max_length": maxURL})
		return
	}
	reason := ""
	u, err := url.Parse(text)
	switch {
	case text == "":
		reason = "input is empty"
	case err != nil:
		reason = "invalid URL"
		if ue, ok := err.(*url.Error); ok {
			// Some of net/url's reasons name the package: not for clients.
			reason = strings.TrimPrefix(ue.Err.Error(), "net/url: ")
		}
	case u.Scheme == "":
		reason = "relative URL without a base"
	case u.Opaque != "" || u.Hostname() == "":
		reason = "empty host"
	}
	if reason != "" {
		c.add(v, "url_parsing", "Input should be a valid URL, "+reason, map[string]any{"error": reason})
		return
	}
	for _, sc := range s.schemes {
		if strings.EqualFold(sc, u.Scheme) {
			return
		}
	}
	c.add(v, "url_scheme", "URL scheme should be "+s.expected, map[string]any{"expected_schemes": s.expected})
}

// AnySchema accepts any JSON value, null included.
type AnySchema struct{}

// Any accepts any JSON value, null included.
func Any() AnySchema { return AnySchema{} }

func (AnySchema) check(*checker, Value) {}

// ---- containers ----

// ArraySchema is a JSON array whose elements all match one schema.
//
//	not an array        list_type  "Input should be a valid list"
//	more than max       too_long   ctx {"field_type":"List","max_length":max,"actual_length":n}
//	fewer than min      too_short  ctx {"field_type":"List","min_length":min,"actual_length":n}
//
// An array that is too long is reported alone, its elements unchecked; one
// that is too short still has its elements checked (loc ends with their
// index).
type ArraySchema struct {
	item     Schema
	min, max int // max < 0: no maximum
	nullable bool
}

// Array is an array of item, of any length.
func Array(item Schema) *ArraySchema { return &ArraySchema{item: item, max: -1} }

// Items bounds the number of elements to [min, max]; max < 0 means no
// maximum.
func (s *ArraySchema) Items(min, max int) *ArraySchema {
	return derive(s, func(c *ArraySchema) { c.min, c.max = min, max })
}

// Nullable also accepts null.
func (s *ArraySchema) Nullable() *ArraySchema {
	return derive(s, func(c *ArraySchema) { c.nullable = true })
}

func (s *ArraySchema) check(c *checker, v Value) {
	if !c.typed(v, s.nullable, KindArray, "list_type", "Input should be a valid list") {
		return
	}
	n := v.Len()
	if s.max >= 0 && n > s.max {
		c.add(v, "too_long", "List should have at most "+plural(s.max, "item")+" after validation, not "+strconv.Itoa(n),
			map[string]any{"field_type": "List", "max_length": s.max, "actual_length": n})
		return
	}
	if n < s.min {
		c.add(v, "too_short", "List should have at least "+plural(s.min, "item")+" after validation, not "+strconv.Itoa(n),
			map[string]any{"field_type": "List", "min_length": s.min, "actual_length": n})
	}
	nodes := v.d.nodes
	j := v.i + 1
	for k := range n {
		c.pushIdx(k)
		s.item.check(c, Value{v.d, j})
		c.pop()
		j = nodes[j].end
	}
}

// FieldSpec is one member of an object schema; see Field.
type FieldSpec struct {
	name     string
	schema   Schema
	required bool
}

// Field is the member called name (matched exactly, case included) with
// schema s. It is optional until Required is called.
func Field(name string, s Schema) FieldSpec { return FieldSpec{name: name, schema: s} }

// Required makes the member mandatory: when absent it is reported as
// missing. (A required member may still be null if its schema is Nullable.)
func (f FieldSpec) Required() FieldSpec {
	f.required = true
	return f
}

// ObjectSchema is a JSON object with named members.
//
//	not an object        model_attributes_type (dict_type for AnyObject)
//	a required member    missing          "Field required", no input
//	  absent
//	an unknown member    extra_forbidden  "Extra inputs are not permitted"
//	a Check fails        value_error at the object's own loc
//
// Members are checked in the order of the fields given to Object; unknown
// members follow, in document order. Checks run only when everything inside
// the object passed.
type ObjectSchema struct {
	fields   []FieldSpec
	extra    bool // unknown members allowed
	dict     bool // free-form: dict_type wording
	checks   []func(Value) string
	nullable bool
	doc      string // description in JSON Schema
}

// Object is an object with the given members and no others. It panics on
// two fields with the same name or a nil schema (a programming error, found
// when the package's schemas are built).
func Object(fields ...FieldSpec) *ObjectSchema {
	for i, f := range fields {
		if f.schema == nil {
			panic("schema: field " + strconv.Quote(f.name) + " has no schema")
		}
		for _, g := range fields[:i] {
			if g.name == f.name {
				panic("schema: field " + strconv.Quote(f.name) + " declared twice")
			}
		}
	}
	return &ObjectSchema{fields: slices.Clone(fields)}
}

// AnyObject is a free-form object: any members with any values.
func AnyObject() *ObjectSchema { return &ObjectSchema{extra: true, dict: true} }

// AllowExtra lets members other than the declared fields through unchecked.
func (s *ObjectSchema) AllowExtra() *ObjectSchema {
	return derive(s, func(c *ObjectSchema) { c.extra = true })
}

// Check adds a rule on the whole object (cross-field rules): fn returns ""
// when the object is fine, else the message of a value_error reported at
// the object's loc with the object as input. fn sees only objects whose
// members all passed, so it may read them without further checks.
func (s *ObjectSchema) Check(fn func(Value) string) *ObjectSchema {
	return derive(s, func(c *ObjectSchema) { c.checks = append(slices.Clip(c.checks), fn) })
}

// Nullable also accepts null.
func (s *ObjectSchema) Nullable() *ObjectSchema {
	return derive(s, func(c *ObjectSchema) { c.nullable = true })
}

// Validate is Validate(s, v, root...).
func (s *ObjectSchema) Validate(v Value, root ...any) []Violation { return Validate(s, v, root...) }

// index returns the position of the field called name, -1 if none. Members
// usually come in field order, so the search starts at hint.
func (s *ObjectSchema) index(name string, hint int) int {
	n := len(s.fields)
	for k := range n {
		i := hint + k
		if i >= n {
			i -= n
		}
		if s.fields[i].name == name {
			return i
		}
	}
	return -1
}

func (s *ObjectSchema) check(c *checker, v Value) {
	typ, msg := "model_attributes_type", "Input should be a valid dictionary or object to extract fields from"
	if s.dict {
		typ, msg = "dict_type", "Input should be a valid dictionary"
	}
	if !c.typed(v, s.nullable, KindObject, typ, msg) {
		return
	}
	before := c.found
	d := v.d
	// One pass over the members finds each field's node (0: absent; node
	// 0 is the root, never a member) and whether unknown members exist.
	var small [16]int32
	var at []int32
	if len(s.fields) <= len(small) {
		at = small[:len(s.fields)]
	} else {
		at = make([]int32, len(s.fields))
	}
	unknown, hint := false, 0
	j := v.i + 1
	for range d.nodes[v.i].n {
		m := &d.nodes[j]
		if i := s.index(d.key(m), hint); i >= 0 {
			at[i], hint = j, i+1
		} else {
			unknown = true
		}
		j = m.end
	}
	for i := range s.fields {
		f := &s.fields[i]
		if at[i] == 0 && !f.required {
			continue
		}
		c.pushKey(f.name)
		if at[i] != 0 {
			f.schema.check(c, Value{d, at[i]})
		} else {
			c.add(Value{}, "missing", "Field required", nil)
		}
		c.pop()
	}
	if unknown && !s.extra {
		j := v.i + 1
		for range d.nodes[v.i].n {
			m := &d.nodes[j]
			if k := d.key(m); s.index(k, 0) < 0 {
				c.pushKey(k)
				c.add(Value{d, j}, "extra_forbidden", "Extra inputs are not permitted", nil)
				c.pop()
			}
			j = m.end
		}
	}
	if c.found != before {
		return
	}
	for _, fn := range s.checks {
		if msg := fn(v); msg != "" {
			c.add(v, "value_error", "Value error, "+msg, nil)
			return
		}
	}
}
