package schema

import (
	"strconv"

	"github.com/coupond/coupond/api"
)

// Violation is one item of a 422 HTTPValidationError "detail"
// (api.ValidationItem, which the Go SDK reads as client.ValidationItem).
// Loc starts with the root given to Validate ("body", "path", "query",
// "header") and continues with member names (string) and array indices
// (int). Type uses pydantic v2's vocabulary; Msg is pydantic's English
// wording, or "Value error, " followed by a rule's own message for
// value_error. A JSON null input is JSONNull{}; a nil Input (the "missing"
// type) is left out; an array or object input is cut to MaxEchoValues
// values.
type Violation = api.ValidationItem

// JSONNull is the Input of a violation whose offending input was a JSON
// null; it marshals as null (a nil Input means "no input").
type JSONNull struct{}

// MarshalJSON implements json.Marshaler.
func (JSONNull) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

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
