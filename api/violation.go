package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// ValidationItem is one item of a 422 HTTPValidationError "detail" (schema
// ValidationError), shaped like pydantic v2 / FastAPI's. It marshals to
// exactly
//
//	{"loc":[...],"msg":"...","type":"...","ctx":{...},"input":...}
//
// with ctx left out when nil and input left out when nil (absent: the
// "missing" type has none); the server's validator (server/schema) gives a
// JSON null input as a value that marshals as null.
//
// Loc is the path of the failing part: the root ("body", "path", "query",
// "header"), then member names (string) and array indices (int). Type uses
// pydantic v2's vocabulary (missing, string_too_short, ...); Msg is
// pydantic's English wording, or "Value error, " followed by a rule's own
// message for value_error.
type ValidationItem struct {
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Type  string         `json:"type"`
	Ctx   map[string]any `json:"ctx,omitempty"`
	Input any            `json:"input,omitempty"`
}

// MarshalJSON writes the FastAPI shape (a nil Loc as []), without HTML
// escaping, as every JSON coupond writes: a segment's "<=" stays "<=" in
// msg and input (an encoder that escapes HTML still escapes it).
func (v ValidationItem) MarshalJSON() ([]byte, error) {
	type wire ValidationItem
	if v.Loc == nil {
		v.Loc = []any{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(wire(v)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Dotted returns Loc[from:] joined with dots, indices in decimal: the per
// event "campo" of POST /v1/eventos. For an event validated with root
// ("body", "eventos", 3), Dotted(3) of loc ["body","eventos",3,"extra",
// "margen"] is "extra.margen"; an event validated with no root uses
// Dotted(0). "" when nothing is left (the violation is about the whole
// value).
func (v ValidationItem) Dotted(from int) string {
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
