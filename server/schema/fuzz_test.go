package schema

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var fuzzSeeds = []string{
	purchaseEvent,
	`{"cliente_ref":"c9f1a2b3c4d5","contexto":{"canal":"push","acciones_permitidas":[0,1,2]}}`,
	`{"a":1,"a":2}`,
	`{"a":"\u0061","\u0061":1}`,
	`[1e2, -0.0, 10.555, 1E-400, 123456789012345678901234567890]`,
	`"\ud83d\ude00\ud800"`,
	"\"\xff\"",
	`{"x":[[[[[]]]]]}  `,
	`{"k":1} {}`,
	`{"valor":1e99999999999999999999,"ts":"2024-02-30T00:00:00Z"}`,
	`{"s":"a\tb","n":null,"t":true,"f":false}`,
	``,
	` `,
	`nul`,
}

// FuzzParse checks Parse against encoding/json: whatever Parse accepts is
// valid JSON that decodes to the same values; what it refuses that
// encoding/json accepts is refused for one of its documented extra rules;
// canonical JSON is a fixed point.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err != nil {
			se, ok := err.(*SyntaxError)
			if !ok {
				t.Fatalf("Parse error %T, want *SyntaxError", err)
			}
			if se.Offset < 0 || se.Offset > len(data) || se.Msg == "" {
				t.Fatalf("malformed SyntaxError %+v for %d bytes", se, len(data))
			}
			if json.Valid(data) {
				switch {
				case strings.HasPrefix(se.Msg, "Duplicate key"),
					se.Msg == "Invalid UTF-8",
					se.Msg == "Invalid \\uXXXX escape: lone surrogate",
					strings.HasPrefix(se.Msg, "Nesting deeper"):
				default:
					t.Fatalf("Parse(%q) refused valid JSON: %v", data, err)
				}
			}
			wellFormed(t, []Violation{se.Violation("body")}, data)
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Parse(%q) accepted invalid JSON", data)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if diff := cmp.Diff(want, v.Any()); diff != "" {
			t.Fatalf("Any() differs from encoding/json (-want +got):\n%s", diff)
		}
		canon := v.JSON()
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("Parse(canonical %q): %v", canon, err)
		}
		if got := again.JSON(); !bytes.Equal(got, canon) {
			t.Fatalf("canonical JSON not stable: %q then %q", canon, got)
		}
		walk(v, 0)
	})
}

// walk calls every accessor on every value; none may panic.
func walk(v Value, depth int) {
	_ = v.String() + v.NumberText()
	_ = v.Int() + v.Cents()
	_ = v.Float()
	_ = v.Bool() || v.IsNull() || v.Present()
	_ = v.Time()
	_ = v.Kind().String()
	_ = v.Field("a")
	_ = v.Index(v.Len() - 1)
	for _, it := range v.Items() {
		walk(it, depth+1)
	}
	for _, m := range v.Members() {
		walk(m, depth+1)
	}
}

// everything uses every schema type.
var everything = Object(
	Field("s", String().Len(1, 5).Pattern("^[a-z]*$", nil).Enum("a", "bb", "ccc").Nullable()),
	Field("id", ClienteRef()),
	Field("i", Int().Range(-5, 5)),
	Field("n", Number().Range(-1.5, 1e6)),
	Field("m", Money().Range(-100, 100)),
	Field("b", Bool()),
	Field("t", Timestamp().Nullable()),
	Field("u", URL("https")),
	Field("a", Array(Object(Field("x", Int()).Required())).Items(1, 3)),
	Field("o", AnyObject().Nullable()),
	Field("any", Any()),
	Field("req", Bool().Nullable()).Required(),
).Check(func(v Value) string {
	if v.Field("i").Int() == 3 {
		return "tres no"
	}
	return ""
})

// FuzzValidate checks that every violation list is well-formed and that
// whatever validates reads back within its schema's promises.
func FuzzValidate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"s":"bb","id":"c9f1a2b3c4d5","i":3,"n":2.5,"m":0.99,"b":true,"t":"2024-05-01T00:00:00+01:00",
		"u":"https://x.example","a":[{"x":1}],"o":{"k":[1]},"any":null,"req":null}`))
	f.Add([]byte(`{"s":"Z","id":"5512345678","i":1.5,"n":"x","m":1.001,"b":0,"t":"2024-05-01","u":"ftp://x","a":[],"o":1,"x":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, s := range []Schema{compraCat, decisionBody, everything} {
			v, bad := Decode(data, s, "body")
			wellFormed(t, bad, data)
			if len(bad) > 0 {
				continue
			}
			if !v.Present() {
				t.Fatalf("Decode(%q) gave no violation and no value", data)
			}
			switch s {
			case compraCat:
				if v.Field("ts").Time().IsZero() || v.Field("valor").Cents() < 0 || !ValidID(v.Field("event_id").String()) {
					t.Fatalf("valid event reads back wrong: %s", v.JSON())
				}
			case decisionBody:
				ref := v.Field("cliente_ref").String()
				if !ValidID(ref) || LooksLikePhone(ref) || len(ref) < 8 || v.Field("contexto").Field("canal").String() == "" {
					t.Fatalf("valid decision reads back wrong: %s", v.JSON())
				}
			case everything:
				if i := v.Field("i").Int(); i < -5 || i > 5 || i == 3 {
					t.Fatalf("i = %d validated", i)
				}
				if m := v.Field("m").Cents(); m < -100 || m > 100 {
					t.Fatalf("m = %d cents validated", m)
				}
				if tf := v.Field("t"); tf.Present() && !tf.IsNull() && tf.Time().IsZero() {
					t.Fatalf("t = %s validated", tf.JSON())
				}
			}
			// The canonical form of a valid body is valid too.
			if _, again := Decode(v.JSON(), s, "body"); len(again) > 0 {
				t.Fatalf("canonical %s of a valid body gives %v", v.JSON(), again)
			}
		}
	})
}

var knownTypes = map[string]bool{
	"missing": true, "extra_forbidden": true, "string_type": true, "int_type": true, "bool_type": true,
	"float_type": true, "string_too_short": true, "string_too_long": true, "string_pattern_mismatch": true,
	"greater_than_equal": true, "less_than_equal": true, "json_invalid": true, "value_error": true,
	"too_short": true, "too_long": true, "enum": true, "int_from_float": true, "url_parsing": true,
	"url_type": true, "url_scheme": true, "url_too_long": true, "list_type": true, "dict_type": true,
	"model_attributes_type": true, "datetime_type": true, "datetime_parsing": true, "timezone_aware": true,
	"finite_number": true,
}

func wellFormed(t *testing.T, vs []Violation, data []byte) {
	t.Helper()
	for _, v := range vs {
		if len(v.Loc) == 0 || v.Loc[0] != "body" {
			t.Fatalf("violation %+v for %q: loc does not start with the root", v, data)
		}
		for _, e := range v.Loc[1:] {
			switch e := e.(type) {
			case string:
			case int:
				if e < 0 {
					t.Fatalf("violation %+v: negative index", v)
				}
			default:
				t.Fatalf("violation %+v: loc element %T", v, e)
			}
		}
		if !knownTypes[v.Type] || v.Msg == "" {
			t.Fatalf("violation %+v: unknown type or empty msg", v)
		}
		if (v.Type == "missing") != (v.Input == nil) {
			t.Fatalf("violation %+v: input present iff not missing", v)
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal(%+v): %v", v, err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("violation marshals to invalid JSON %q: %v", out, err)
		}
	}
}
