package schema

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCanonical(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"null", `null`, `null`},
		{"true", ` true `, `true`},
		{"false", "\n\tfalse\r\n", `false`},
		{"zero", `0`, `0`},
		{"negative zero", `-0`, `0`},
		{"negative zero fraction", `-0.000`, `0`},
		{"integer", `123`, `123`},
		{"negative", `-42`, `-42`},
		{"trailing fraction zeros", `10.50`, `10.5`},
		{"integral fraction", `100.00`, `100`},
		{"exponent", `1e2`, `100`},
		{"exponent upper", `1.00E+2`, `100`},
		{"negative exponent", `15e-1`, `1.5`},
		{"small", `0.000001`, `0.000001`},
		{"smaller", `1e-7`, `1e-7`},
		{"small with digits", `-1.25e-8`, `-1.25e-8`},
		{"big plain", `1e20`, `100000000000000000000`},
		{"big exponent", `1e21`, `1e+21`},
		{"big mantissa", `12.5e30`, `1.25e+31`},
		{"long exact", `123456789012345678901234567890.125`, `123456789012345678901234567890.125`},
		{"zero exponent", `0e99999999999999999999`, `0`},
		{"huge exponent kept", `1E99999999999999999999`, `1e99999999999999999999`},
		{"string", `"hola"`, `"hola"`},
		{"string escapes", `"a\"b\\c\/d\b\f\n\r\t"`, `"a\"b\\c/d\b\f\n\r\t"`},
		{"unicode escape", `"\u00e9\u4e2d"`, `"é中"`},
		{"surrogate pair", `"\ud83d\ude00"`, `"😀"`},
		{"control escape", `"\u0001"`, `"\u0001"`},
		{"raw utf8", `"niño 😀"`, `"niño 😀"`},
		{"empty array", `[ ]`, `[]`},
		{"array", `[1, "a", null, true, [], {}]`, `[1,"a",null,true,[],{}]`},
		{"empty object", `{ }`, `{}`},
		{"object sorted", `{"b": 1, "a": {"d": [2], "c": 3}}`, `{"a":{"c":3,"d":[2]},"b":1}`},
		{"escaped key", `{"\u0062": 1, "a": 2}`, `{"a":2,"b":1}`},
		{"case differs", `{"a": 1, "A": 2}`, `{"A":2,"a":1}`},
		{"big object", `{"k17":17,"k16":16,"k15":15,"k14":14,"k13":13,"k12":12,"k11":11,"k10":10,"k09":9,"k08":8,"k07":7,"k06":6,"k05":5,"k04":4,"k03":3,"k02":2,"k01":1}`,
			`{"k01":1,"k02":2,"k03":3,"k04":4,"k05":5,"k06":6,"k07":7,"k08":8,"k09":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17}`},
		{"depth limit", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, string(v.JSON())); diff != "" {
				t.Errorf("Parse(%q).JSON() mismatch (-want +got):\n%s", tt.in, diff)
			}
			// Canonical JSON is a fixed point.
			again, err := Parse(v.JSON())
			if err != nil {
				t.Fatalf("Parse(canonical %q) error: %v", v.JSON(), err)
			}
			if diff := cmp.Diff(tt.want, string(again.JSON())); diff != "" {
				t.Errorf("canonical JSON is not stable (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	var manyDup strings.Builder
	manyDup.WriteString("{")
	for i := range 20 {
		manyDup.WriteString(`"k` + string(rune('a'+i)) + `":1,`)
	}
	manyDup.WriteString(`"kc":2}`)
	tests := []struct {
		name string
		in   string
		want *SyntaxError
	}{
		{"empty", ``, &SyntaxError{0, "Expecting value"}},
		{"blank", `   `, &SyntaxError{3, "Expecting value"}},
		{"bom", "\xef\xbb\xbf{}", &SyntaxError{0, "Expecting value"}},
		{"trailing data", `{"a":1} x`, &SyntaxError{8, "Extra data"}},
		{"two values", `1 2`, &SyntaxError{2, "Extra data"}},
		{"trailing comma object", `{"a":1,}`, &SyntaxError{7, "Expecting property name enclosed in double quotes"}},
		{"trailing comma array", `[1,]`, &SyntaxError{3, "Expecting value"}},
		{"unquoted key", `{a:1}`, &SyntaxError{1, "Expecting property name enclosed in double quotes"}},
		{"single quotes", `{'a':1}`, &SyntaxError{1, "Expecting property name enclosed in double quotes"}},
		{"missing colon", `{"a" 1}`, &SyntaxError{5, "Expecting ':' delimiter"}},
		{"missing comma", `{"a":1 "b":2}`, &SyntaxError{7, "Expecting ',' delimiter"}},
		{"missing comma array", `[1 2]`, &SyntaxError{3, "Expecting ',' delimiter"}},
		{"unclosed object", `{"a":1`, &SyntaxError{6, "Expecting ',' delimiter"}},
		{"unclosed array", `[1`, &SyntaxError{2, "Expecting ',' delimiter"}},
		{"unterminated string", `"abc`, &SyntaxError{0, "Unterminated string"}},
		{"unterminated escaped string", `"a\n`, &SyntaxError{0, "Unterminated string"}},
		{"control char", "\"a\nb\"", &SyntaxError{2, "Invalid control character in string"}},
		{"bad escape", `"\x"`, &SyntaxError{1, "Invalid \\escape"}},
		{"short unicode escape", `"\u12"`, &SyntaxError{1, "Invalid \\uXXXX escape"}},
		{"lone high surrogate", `"\ud800"`, &SyntaxError{1, "Invalid \\uXXXX escape: lone surrogate"}},
		{"lone low surrogate", `"\udc00x"`, &SyntaxError{1, "Invalid \\uXXXX escape: lone surrogate"}},
		{"high then non-low", `"\ud800\u0041"`, &SyntaxError{1, "Invalid \\uXXXX escape: lone surrogate"}},
		{"invalid utf8", "\"a\xffb\"", &SyntaxError{2, "Invalid UTF-8"}},
		{"invalid utf8 after escape", "\"\\n\xc3\"", &SyntaxError{3, "Invalid UTF-8"}},
		{"utf16 surrogate in utf8", "\"\xed\xa0\x80\"", &SyntaxError{1, "Invalid UTF-8"}},
		{"leading zero", `01`, &SyntaxError{1, "Extra data"}},
		{"plus sign", `+1`, &SyntaxError{0, "Expecting value"}},
		{"bare minus", `-`, &SyntaxError{0, "Expecting value"}},
		{"dot without digits", `1.`, &SyntaxError{2, "Invalid number: expecting digit after '.'"}},
		{"leading dot", `.5`, &SyntaxError{0, "Expecting value"}},
		{"exponent without digits", `1e+`, &SyntaxError{3, "Invalid number: expecting exponent digits"}},
		{"nan", `NaN`, &SyntaxError{0, "Expecting value"}},
		{"infinity", `-Infinity`, &SyntaxError{0, "Expecting value"}},
		{"truncated literal", `tru`, &SyntaxError{0, "Expecting value"}},
		{"capital literal", `True`, &SyntaxError{0, "Expecting value"}},
		{"duplicate key", `{"a":1,"b":2,"a":3}`, &SyntaxError{13, `Duplicate key "a"`}},
		{"duplicate key via escape", `{"a":1,"\u0061":2}`, &SyntaxError{7, `Duplicate key "a"`}},
		{"duplicate nested", `{"x":{"a":1,"a":1}}`, &SyntaxError{12, `Duplicate key "a"`}},
		{"duplicate in big object", manyDup.String(), &SyntaxError{141, `Duplicate key "kc"`}},
		{"too deep", deep, &SyntaxError{MaxDepth, "Nesting deeper than 64"}},
		{"too deep objects", strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), &SyntaxError{5 * MaxDepth, "Nesting deeper than 64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			got, _ := err.(*SyntaxError)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) error mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseCopiesInput(t *testing.T) {
	data := []byte(`{"a":"xyz","b\n":"q\tr"}`)
	v, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = ' '
	}
	got := []string{v.Field("a").String(), v.Field("b\n").String()}
	if diff := cmp.Diff([]string{"xyz", "q\tr"}, got); diff != "" {
		t.Errorf("values changed with the input buffer (-want +got):\n%s", diff)
	}
}

func TestSyntaxErrorViolation(t *testing.T) {
	_, err := Parse([]byte(`{"a":}`))
	got := err.(*SyntaxError).Violation("body")
	want := Violation{
		Loc:   []any{"body", 5},
		Msg:   "JSON decode error",
		Type:  "json_invalid",
		Ctx:   map[string]any{"error": "Expecting value"},
		Input: map[string]any{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Violation mismatch (-want +got):\n%s", diff)
	}
	if got, want := err.Error(), "invalid JSON at offset 5: Expecting value"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestParseInstantRange(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"1970-01-01T00:00:00Z", true},
		{"1970-01-01T01:00:00+01:00", true},
		{"9999-12-31T23:59:59.999999999Z", true},
		{"9999-12-31T23:59:59+00:00", true},
		{"1969-12-31T23:59:59.999Z", false},
		{"0001-01-01T00:00:00Z", false},
		{"0000-01-01T00:00:00+01:00", false},
		{"9999-12-31T23:00:00-14:00", false},
		{"2026-11-02T12:00:00", false},
	} {
		if _, ok := ParseInstant(tc.in); ok != tc.ok {
			t.Errorf("ParseInstant(%q) ok = %v, want %v", tc.in, ok, tc.ok)
		}
	}
}
