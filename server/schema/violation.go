package schema

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Violation is one item of a 422 HTTPValidationError "detail", shaped like
// pydantic v2 / FastAPI's. It marshals to exactly
//
//	{"loc":[...],"msg":"...","type":"...","ctx":{...},"input":...}
//
// with ctx left out when nil and input left out when nil (absent: the
// "missing" type has none). A JSON null input is JSONNull{}.
//
// Loc starts with the root given to Validate ("body", "path", "query",
// "header") and continues with member names (string) and array indices
// (int). Type uses pydantic v2's vocabulary; Msg is pydantic's English
// wording, or "Value error, " followed by a rule's own message for
// value_error.
type Violation struct {
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Type  string         `json:"type"`
	Ctx   map[string]any `json:"ctx,omitempty"`
	Input any            `json:"input,omitempty"`
}

// MarshalJSON writes the FastAPI shape (a nil Loc as []).
func (v Violation) MarshalJSON() ([]byte, error) {
	type wire Violation
	if v.Loc == nil {
		v.Loc = []any{}
	}
	return json.Marshal(wire(v))
}

// JSONNull is the Input of a violation whose offending input was a JSON
// null; it marshals as null (a nil Input means "no input").
type JSONNull struct{}

// MarshalJSON implements json.Marshaler.
func (JSONNull) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// Dotted returns Loc[from:] joined with dots, indices in decimal: the per
// event "campo" of POST /v1/eventos. For an event validated with root
// ("body", "eventos", 3), Dotted(3) of loc ["body","eventos",3,"extra",
// "margen"] is "extra.margen"; an event validated with no root uses
// Dotted(0). "" when nothing is left (the violation is about the whole
// value).
func (v Violation) Dotted(from int) string {
	if from < 0 {
		from = 0
	}
	if from >= len(v.Loc) {
		return ""
	}
	var b strings.Builder
	for i, e := range v.Loc[from:] {
		if i > 0 {
			b.WriteByte('.')
		}
		switch e := e.(type) {
		case string:
			b.WriteString(e)
		case int:
			b.WriteString(strconv.Itoa(e))
		default:
			b.WriteString(stringOf(e))
		}
	}
	return b.String()
}

func stringOf(e any) string {
	data, err := json.Marshal(e)
	if err != nil {
		return "?"
	}
	return string(data)
}

// ValueError is a value_error at loc for a rule checked outside a schema
// (cross-field rules, lookups): msg is prefixed with "Value error, " as
// pydantic does. A nil input is left out.
func ValueError(loc []any, msg string, input any) Violation {
	return Violation{Loc: loc, Msg: "Value error, " + msg, Type: "value_error", Input: input}
}

// Missing is the "missing" violation of a required member name under root.
func Missing(root, name string) Violation {
	return Violation{Loc: []any{root, name}, Msg: "Field required", Type: "missing"}
}

// TooLong is the string_too_long violation of the string member name under
// root, for strings read outside a schema (form fields, headers).
func TooLong(root, name, input string, max int) Violation {
	return Violation{
		Loc:   []any{root, name},
		Msg:   "String should have at most " + plural(max, "character"),
		Type:  "string_too_long",
		Ctx:   map[string]any{"max_length": max},
		Input: input,
	}
}

// PatternMismatch is the string_pattern_mismatch violation of the string
// member name under root, for strings read outside a schema (path
// parameters, form fields).
func PatternMismatch(root, name, input, pattern string) Violation {
	return Violation{
		Loc:   []any{root, name},
		Msg:   "String should match pattern '" + pattern + "'",
		Type:  "string_pattern_mismatch",
		Ctx:   map[string]any{"pattern": pattern},
		Input: input,
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
