package schema

// Decode parses data strictly (see Parse) and validates the result against s
// with Validate. Input that is empty or only whitespace is one "missing"
// violation at root (FastAPI's answer to a missing body); input Parse
// refuses is one json_invalid violation (see SyntaxError.Violation). The
// Value is returned whenever data parsed, even if it broke s.
func Decode(data []byte, s Schema, root ...any) (Value, []Violation) {
	var v Value // absent when data is blank
	if !blank(data) {
		var err error
		if v, err = Parse(data); err != nil {
			return Value{}, []Violation{err.(*SyntaxError).Violation(root...)}
		}
	}
	return v, Validate(s, v, root...)
}

// blank reports whether data is empty or only JSON whitespace.
func blank(data []byte) bool {
	for _, c := range data {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// Decode is Decode(data, s, root...): the one call an endpoint makes for its
// body, with root "body".
func (s *ObjectSchema) Decode(data []byte, root ...any) (Value, []Violation) {
	return Decode(data, s, root...)
}
