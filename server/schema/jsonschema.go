package schema

import (
	"encoding/json"
	"math"
	"strings"
)

// JSONSchema returns s as a JSON Schema in the dialect of OpenAPI 3.1 (JSON
// Schema 2020-12), for the API's OpenAPI document: the document is generated
// from the very schemas the endpoints validate with, so the two cannot
// drift. The result is a fresh tree of map[string]any, []any and scalars
// that the caller may change.
//
// What JSON Schema cannot say is carried by extensions and descriptions:
// money (MoneySchema) is "type": "number" with "x-max-decimals": 2 rather
// than "multipleOf": 0.01, which floating-point validators get wrong (0.07
// is not a float multiple of 0.01); rules added with StringSchema.Check and
// ObjectSchema.Check appear only as the description a schema was given with
// Doc. Validation may be more lenient than the formats named (a timestamp
// may use a space for "T" and leave out the seconds, as pydantic accepts),
// never stricter.
func JSONSchema(s Schema) map[string]any { return s.jsonSchema() }

// JSON Schema type names, nullable or not.
func typeOf(name string, nullable bool) any {
	if nullable {
		return []any{name, "null"}
	}
	return name
}

func withDoc(m map[string]any, doc string) map[string]any {
	if doc != "" {
		m["description"] = doc
	}
	return m
}

// Doc sets the description the schema carries in JSON Schema, e.g. a rule
// added with Check.
func (s *StringSchema) Doc(text string) *StringSchema {
	return derive(s, func(c *StringSchema) { c.doc = text })
}

func (s *StringSchema) jsonSchema() map[string]any {
	m := map[string]any{"type": typeOf("string", s.nullable)}
	if s.min > 0 {
		m["minLength"] = s.min
	}
	if s.max >= 0 {
		m["maxLength"] = s.max
	}
	if s.pattern != "" {
		m["pattern"] = s.pattern
	}
	if s.enum != nil {
		e := make([]any, 0, len(s.enum)+1)
		for _, v := range s.enum {
			e = append(e, v)
		}
		if s.nullable {
			e = append(e, nil)
		}
		m["enum"] = e
	}
	return withDoc(m, s.doc)
}

func (s *IntSchema) jsonSchema() map[string]any {
	m := map[string]any{"type": typeOf("integer", s.nullable), "format": "int64"}
	if s.min != math.MinInt64 {
		m["minimum"] = s.min
	}
	if s.max != math.MaxInt64 {
		m["maximum"] = s.max
	}
	return m
}

func (s *NumberSchema) jsonSchema() map[string]any {
	m := map[string]any{"type": typeOf("number", s.nullable)}
	if s.hasMin {
		m["minimum"] = s.min
	}
	if s.hasMax {
		m["maximum"] = s.max
	}
	return m
}

func (s *MoneySchema) jsonSchema() map[string]any {
	m := map[string]any{
		"type":           typeOf("number", s.nullable),
		"x-max-decimals": 2,
		"description":    "Amount in MXN without VAT, a JSON number with at most two decimals (kept as integer cents; more decimals is a value_error).",
	}
	if s.min != math.MinInt64 {
		m["minimum"] = json.Number(centsText(s.min))
	}
	if s.max != math.MaxInt64 {
		m["maximum"] = json.Number(centsText(s.max))
	}
	return m
}

func (s *BoolSchema) jsonSchema() map[string]any {
	return map[string]any{"type": typeOf("boolean", s.nullable)}
}

func (s *TimestampSchema) jsonSchema() map[string]any {
	return map[string]any{
		"type":        typeOf("string", s.nullable),
		"format":      "date-time",
		"description": "ISO-8601 date-time with its zone (Z or ±hh:mm); a time without a zone is refused (timezone_aware). Its UTC instant must lie between 1970-01-01 and 9999-12-31 (value_error outside). Returned in UTC with the suffix Z.",
	}
}

func (s *URLSchema) jsonSchema() map[string]any {
	alts := make([]string, len(s.schemes))
	for i, sc := range s.schemes {
		var b strings.Builder
		for _, r := range sc {
			if lo, up := strings.ToLower(string(r)), strings.ToUpper(string(r)); lo != up {
				b.WriteString("[" + lo + up + "]")
			} else {
				b.WriteString(regexpQuote(string(r)))
			}
		}
		alts[i] = b.String()
	}
	return map[string]any{
		"type":        typeOf("string", s.nullable),
		"format":      "uri",
		"maxLength":   maxURL,
		"pattern":     "^(?:" + strings.Join(alts, "|") + ")://",
		"description": "Absolute URL with a host; scheme " + s.expected + ".",
	}
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (AnySchema) jsonSchema() map[string]any { return map[string]any{} }

func (s *ArraySchema) jsonSchema() map[string]any {
	m := map[string]any{"type": typeOf("array", s.nullable), "items": s.item.jsonSchema()}
	if s.min > 0 {
		m["minItems"] = s.min
	}
	if s.max >= 0 {
		m["maxItems"] = s.max
	}
	return m
}

// Doc sets the description the schema carries in JSON Schema, e.g. a rule
// added with Check.
func (s *ObjectSchema) Doc(text string) *ObjectSchema {
	return derive(s, func(c *ObjectSchema) { c.doc = text })
}

func (s *ObjectSchema) jsonSchema() map[string]any {
	m := map[string]any{"type": typeOf("object", s.nullable)}
	if s.dict {
		return withDoc(m, s.doc)
	}
	props := make(map[string]any, len(s.fields))
	var req []any
	for _, f := range s.fields {
		props[f.name] = f.schema.jsonSchema()
		if f.required {
			req = append(req, f.name)
		}
	}
	m["properties"] = props
	if req != nil {
		m["required"] = req
	}
	if !s.extra {
		m["additionalProperties"] = false
	}
	return withDoc(m, s.doc)
}

// ErrorType is one value of a validation error's "type".
type ErrorType struct {
	Type    string
	Meaning string
}

// ErrorTypes lists every "type" the package reports (pydantic v2's
// vocabulary), with what it means, for the API's documentation.
func ErrorTypes() []ErrorType {
	return []ErrorType{
		{"missing", "a required member, or the whole body, is absent (no input)"},
		{"extra_forbidden", "a member the schema does not declare (names are case-sensitive)"},
		{"json_invalid", "the body is not strict JSON: syntax error, duplicate key, trailing data, invalid UTF-8, lone surrogate, nesting deeper than 64; ctx.error says which"},
		{"model_attributes_type", "an object was expected"},
		{"dict_type", "a free-form object was expected"},
		{"list_type", "an array was expected"},
		{"too_short", "an array has fewer items than allowed; ctx min_length, actual_length"},
		{"too_long", "an array has more items than allowed (its items are then not checked); ctx max_length, actual_length"},
		{"string_type", "a string was expected"},
		{"string_too_short", "a string is shorter than allowed (Unicode code points); ctx.min_length"},
		{"string_too_long", "a string is longer than allowed (Unicode code points); ctx.max_length"},
		{"string_pattern_mismatch", "a string does not match its pattern; ctx.pattern"},
		{"enum", "a string is not one of the allowed values; ctx.expected"},
		{"int_type", "an integer was expected"},
		{"int_from_float", "an integer was expected and the number has a fractional part"},
		{"float_type", "a number was expected"},
		{"finite_number", "a number beyond the float64 range"},
		{"bool_type", "true or false was expected (no coercion from 0/1 or strings)"},
		{"greater_than_equal", "a number below its minimum; ctx.ge"},
		{"less_than_equal", "a number above its maximum; ctx.le"},
		{"datetime_type", "a timestamp string was expected"},
		{"datetime_parsing", "a timestamp that is not ISO-8601; ctx.error"},
		{"timezone_aware", "a timestamp without its zone"},
		{"url_type", "a URL string was expected"},
		{"url_too_long", "a URL longer than 2083 characters"},
		{"url_parsing", "not an absolute URL with a host (also: a webhook destination that is refused); ctx.error"},
		{"url_scheme", "a URL scheme not allowed; ctx.expected_schemes"},
		{"value_error", "any other rule, explained in msg after \"Value error, \": money with more than two decimals, a cliente_ref that looks like a telephone number, cross-field rules, unknown catalog action or campaign, segment grammar"},
	}
}
