package schema

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decisionBody is the online decision request (contract section 4).
var decisionBody = Object(
	Field("cliente_ref", ClienteRef()).Required(),
	Field("contexto", Object(
		Field("canal", String().Len(1, 256)).Required(),
		Field("campana_id", ID()),
		Field("acciones_permitidas", Array(Int().Min(0)).Items(0, 1000)),
	)).Required(),
)

func num(s string) json.Number { return json.Number(s) }

func TestValidate(t *testing.T) {
	upper := func(s string) string {
		if strings.ToUpper(s) != s {
			return "debe ir en mayúsculas"
		}
		return ""
	}
	tests := []struct {
		name   string
		schema Schema
		in     string
		want   []Violation
	}{
		// Strings.
		{"string ok", String(), `"x"`, nil},
		{"string_type number", String(), `5`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid string", Type: "string_type", Input: num("5")}}},
		{"string_type null", String(), `null`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid string", Type: "string_type", Input: JSONNull{}}}},
		{"string_type object", String(), `{"a":[1]}`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid string", Type: "string_type", Input: map[string]any{"a": []any{num("1")}}}}},
		{"nullable string null", String().Nullable(), `null`, nil},
		{"string_too_short", String().Len(8, 128), `"abc"`, []Violation{
			{Loc: []any{"body"}, Msg: "String should have at least 8 characters", Type: "string_too_short", Ctx: map[string]any{"min_length": 8}, Input: "abc"}}},
		{"string_too_short singular", String().Len(1, 3), `""`, []Violation{
			{Loc: []any{"body"}, Msg: "String should have at least 1 character", Type: "string_too_short", Ctx: map[string]any{"min_length": 1}, Input: ""}}},
		{"string_too_long", String().Len(1, 3), `"abcd"`, []Violation{
			{Loc: []any{"body"}, Msg: "String should have at most 3 characters", Type: "string_too_long", Ctx: map[string]any{"max_length": 3}, Input: "abcd"}}},
		{"length counts characters", String().Len(1, 3), `"ñ😀\u00e9"`, nil},
		{"no maximum", String().Len(0, -1), `"` + strings.Repeat("x", 5000) + `"`, nil},
		{"string_pattern_mismatch regexp", String().Pattern("^[a-z]+$", nil), `"ABC"`, []Violation{
			{Loc: []any{"body"}, Msg: "String should match pattern '^[a-z]+$'", Type: "string_pattern_mismatch", Ctx: map[string]any{"pattern": "^[a-z]+$"}, Input: "ABC"}}},
		{"pattern ok", String().Pattern("^[a-z]+$", nil), `"abc"`, nil},
		{"id pattern", ID(), `"a b"`, []Violation{
			{Loc: []any{"body"}, Msg: "String should match pattern '" + IDPatternText + "'", Type: "string_pattern_mismatch", Ctx: map[string]any{"pattern": IDPatternText}, Input: "a b"}}},
		{"id pattern by text", String().Pattern(IDPatternText, nil), `"-x"`, []Violation{
			{Loc: []any{"body"}, Msg: "String should match pattern '" + IDPatternText + "'", Type: "string_pattern_mismatch", Ctx: map[string]any{"pattern": IDPatternText}, Input: "-x"}}},
		{"length before pattern", ID(), `""`, []Violation{
			{Loc: []any{"body"}, Msg: "String should have at least 1 character", Type: "string_too_short", Ctx: map[string]any{"min_length": 1}, Input: ""}}},
		{"enum", String().Enum("A", "B", "C"), `"a"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be 'A', 'B' or 'C'", Type: "enum", Ctx: map[string]any{"expected": "'A', 'B' or 'C'"}, Input: "a"}}},
		{"enum two", String().Enum("comunicaciones", "cuenta"), `"x"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be 'comunicaciones' or 'cuenta'", Type: "enum", Ctx: map[string]any{"expected": "'comunicaciones' or 'cuenta'"}, Input: "x"}}},
		{"enum ok", String().Enum("A", "B"), `"B"`, nil},
		{"check", String().Check(upper), `"abc"`, []Violation{
			{Loc: []any{"body"}, Msg: "Value error, debe ir en mayúsculas", Type: "value_error", Input: "abc"}}},
		{"check ok", String().Check(upper), `"ABC"`, nil},
		{"cliente_ref ok", ClienteRef(), `"c9f1a2b3c4d5e6f7"`, nil},
		{"cliente_ref phone", ClienteRef(), `"55-1234-5678"`, []Violation{
			{Loc: []any{"body"}, Msg: "Value error, " + phoneMessage, Type: "value_error", Input: "55-1234-5678"}}},
		{"cliente_ref email", ClienteRef(), `"ana@example.com"`, []Violation{
			{Loc: []any{"body"}, Msg: "String should match pattern '" + IDPatternText + "'", Type: "string_pattern_mismatch", Ctx: map[string]any{"pattern": IDPatternText}, Input: "ana@example.com"}}},
		{"cliente_ref short", ClienteRef(), `"abc"`, []Violation{
			{Loc: []any{"body"}, Msg: "String should have at least 8 characters", Type: "string_too_short", Ctx: map[string]any{"min_length": 8}, Input: "abc"}}},

		// Integers.
		{"int ok", Int(), `42`, nil},
		{"int integral float", Int(), `5.0`, nil},
		{"int integral exponent", Int(), `1e2`, nil},
		{"int_type string", Int(), `"5"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid integer", Type: "int_type", Input: "5"}}},
		{"int_type bool", Int(), `true`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid integer", Type: "int_type", Input: true}}},
		{"int_from_float", Int(), `1.5`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid integer, got a number with a fractional part", Type: "int_from_float", Input: num("1.5")}}},
		{"int_from_float exponent", Int(), `15e-1`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid integer, got a number with a fractional part", Type: "int_from_float", Input: num("15e-1")}}},
		{"greater_than_equal", Int().Min(0), `-1`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be greater than or equal to 0", Type: "greater_than_equal", Ctx: map[string]any{"ge": int64(0)}, Input: num("-1")}}},
		{"less_than_equal", Int().Max(10), `11`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be less than or equal to 10", Type: "less_than_equal", Ctx: map[string]any{"le": int64(10)}, Input: num("11")}}},
		{"int range ok", Int().Range(1, 10), `10`, nil},
		{"int beyond int64", Int(), `1e30`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be less than or equal to 9223372036854775807", Type: "less_than_equal", Ctx: map[string]any{"le": int64(math.MaxInt64)}, Input: num("1e30")}}},
		{"int below int64", Int().Max(5), `-1e30`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be greater than or equal to -9223372036854775808", Type: "greater_than_equal", Ctx: map[string]any{"ge": int64(math.MinInt64)}, Input: num("-1e30")}}},
		{"nullable int null", Int().Nullable(), `null`, nil},
		{"int null", Int(), `null`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid integer", Type: "int_type", Input: JSONNull{}}}},

		// Numbers.
		{"number ok", Number().Range(0, 100), `99.5`, nil},
		{"number int ok", Number().Range(0, 100), `100`, nil},
		{"float_type", Number(), `"1"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid number", Type: "float_type", Input: "1"}}},
		{"number le", Number().Range(0, 100), `100.5`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be less than or equal to 100", Type: "less_than_equal", Ctx: map[string]any{"le": 100.0}, Input: num("100.5")}}},
		{"number ge", Number().Min(0.5), `0.25`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be greater than or equal to 0.5", Type: "greater_than_equal", Ctx: map[string]any{"ge": 0.5}, Input: num("0.25")}}},
		{"finite_number", Number(), `1e999`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a finite number", Type: "finite_number", Input: num("1e999")}}},

		// Money.
		{"money one decimal", Money(), `10.5`, nil},
		{"money two decimals", Money(), `10.55`, nil},
		{"money trailing zero", Money(), `10.550`, nil},
		{"money exponent", Money(), `1e2`, nil},
		{"money exponent cents", Money(), `1234e-2`, nil},
		{"money three decimals", Money(), `10.555`, []Violation{
			{Loc: []any{"body"}, Msg: "Value error, " + moneyDecimalsMessage, Type: "value_error", Input: num("10.555")}}},
		{"money tiny exponent", Money(), `1e-3`, []Violation{
			{Loc: []any{"body"}, Msg: "Value error, " + moneyDecimalsMessage, Type: "value_error", Input: num("1e-3")}}},
		{"money float_type", Money(), `"10.50"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid number", Type: "float_type", Input: "10.50"}}},
		{"money le", Money().Range(0, 100_000_000_000), `1000000000.01`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be less than or equal to 1000000000", Type: "less_than_equal", Ctx: map[string]any{"le": num("1000000000")}, Input: num("1000000000.01")}}},
		{"money at max", Money().Range(0, 100_000_000_000), `1000000000`, nil},
		{"money ge", Money().Range(0, 100_000_000_000), `-0.01`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be greater than or equal to 0", Type: "greater_than_equal", Ctx: map[string]any{"ge": num("0")}, Input: num("-0.01")}}},
		{"money ge in cents", Money().Min(50), `0.49`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be greater than or equal to 0.5", Type: "greater_than_equal", Ctx: map[string]any{"ge": num("0.5")}, Input: num("0.49")}}},
		{"money only zero", Money().Range(0, 0), `0.01`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be less than or equal to 0", Type: "less_than_equal", Ctx: map[string]any{"le": num("0")}, Input: num("0.01")}}},
		{"money zero ok", Money().Range(0, 0), `0.00`, nil},
		{"money beyond int64", Money(), `1e30`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be less than or equal to 92233720368547758.07", Type: "less_than_equal", Ctx: map[string]any{"le": num("92233720368547758.07")}, Input: num("1e30")}}},
		{"nullable money", Money().Nullable(), `null`, nil},

		// Booleans.
		{"bool ok", Bool(), `false`, nil},
		{"bool_type number", Bool(), `1`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid boolean", Type: "bool_type", Input: num("1")}}},
		{"bool_type string", Bool(), `"true"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid boolean", Type: "bool_type", Input: "true"}}},
		{"nullable bool", Bool().Nullable(), `null`, nil},

		// Timestamps.
		{"timestamp ok", Timestamp(), `"2024-05-01T12:34:56-06:00"`, nil},
		{"datetime_type", Timestamp(), `1714588496`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid datetime", Type: "datetime_type", Input: num("1714588496")}}},
		{"timezone_aware", Timestamp(), `"2024-05-01T12:34:56"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should have timezone info", Type: "timezone_aware", Input: "2024-05-01T12:34:56"}}},
		{"datetime_parsing", Timestamp(), `"2024-13-01T00:00:00Z"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid datetime, month value is outside expected range of 1-12", Type: "datetime_parsing",
				Ctx: map[string]any{"error": "month value is outside expected range of 1-12"}, Input: "2024-13-01T00:00:00Z"}}},
		{"nullable timestamp", Timestamp().Nullable(), `null`, nil},

		// URLs.
		{"url ok", URL("https"), `"https://hooks.example.com/coupond?x=1"`, nil},
		{"url_type", URL(), `5`, []Violation{
			{Loc: []any{"body"}, Msg: "URL input should be a string or URL", Type: "url_type", Input: num("5")}}},
		{"url_parsing relative", URL(), `"not a url"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid URL, relative URL without a base", Type: "url_parsing",
				Ctx: map[string]any{"error": "relative URL without a base"}, Input: "not a url"}}},
		{"url_parsing empty host", URL(), `"https://"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid URL, empty host", Type: "url_parsing",
				Ctx: map[string]any{"error": "empty host"}, Input: "https://"}}},
		{"url_parsing empty", URL(), `""`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid URL, input is empty", Type: "url_parsing",
				Ctx: map[string]any{"error": "input is empty"}, Input: ""}}},
		{"url_parsing bad", URL(), `"https://exa mple.com/"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid URL, invalid character \" \" in host name", Type: "url_parsing",
				Ctx: map[string]any{"error": "invalid character \" \" in host name"}, Input: "https://exa mple.com/"}}},
		// net/url's own wording names the Go package: an internal detail.
		{"url_parsing control character", URL(), `"https://example.com/\u0000"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid URL, invalid control character in URL", Type: "url_parsing",
				Ctx: map[string]any{"error": "invalid control character in URL"}, Input: "https://example.com/\x00"}}},
		{"url_scheme", URL("https"), `"http://example.com"`, []Violation{
			{Loc: []any{"body"}, Msg: "URL scheme should be 'https'", Type: "url_scheme",
				Ctx: map[string]any{"expected_schemes": "'https'"}, Input: "http://example.com"}}},
		{"url_too_long", URL(), `"https://example.com/` + strings.Repeat("a", 2100) + `"`, []Violation{
			{Loc: []any{"body"}, Msg: "URL should have at most 2083 characters", Type: "url_too_long",
				Ctx: map[string]any{"max_length": 2083}, Input: "https://example.com/" + strings.Repeat("a", 2100)}}},

		// Arrays.
		{"array ok", Array(Int()).Items(1, 3), `[1,2,3]`, nil},
		{"list_type", Array(Int()), `"x"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid list", Type: "list_type", Input: "x"}}},
		{"too_short", Array(Int()).Items(1, 3), `[]`, []Violation{
			{Loc: []any{"body"}, Msg: "List should have at least 1 item after validation, not 0", Type: "too_short",
				Ctx: map[string]any{"field_type": "List", "min_length": 1, "actual_length": 0}, Input: []any{}}}},
		{"too_long", Array(Int()).Items(0, 2), `[1,2,"x"]`, []Violation{
			{Loc: []any{"body"}, Msg: "List should have at most 2 items after validation, not 3", Type: "too_long",
				Ctx: map[string]any{"field_type": "List", "max_length": 2, "actual_length": 3}, Input: []any{num("1"), num("2"), "x"}}}},
		{"bad items", Array(Int().Min(0)), `[1,"a",-2,3]`, []Violation{
			{Loc: []any{"body", 1}, Msg: "Input should be a valid integer", Type: "int_type", Input: "a"},
			{Loc: []any{"body", 2}, Msg: "Input should be greater than or equal to 0", Type: "greater_than_equal", Ctx: map[string]any{"ge": int64(0)}, Input: num("-2")}}},
		{"too_short and bad item", Array(Int()).Items(2, 3), `[true]`, []Violation{
			{Loc: []any{"body"}, Msg: "List should have at least 2 items after validation, not 1", Type: "too_short",
				Ctx: map[string]any{"field_type": "List", "min_length": 2, "actual_length": 1}, Input: []any{true}},
			{Loc: []any{"body", 0}, Msg: "Input should be a valid integer", Type: "int_type", Input: true}}},
		{"nullable array", Array(Int()).Nullable(), `null`, nil},

		// Objects.
		{"model_attributes_type", Object(), `[1]`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid dictionary or object to extract fields from", Type: "model_attributes_type", Input: []any{num("1")}}}},
		{"dict_type", AnyObject(), `"x"`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid dictionary", Type: "dict_type", Input: "x"}}},
		{"any object", AnyObject(), `{"a":{"b":[1,null]},"c":"d"}`, nil},
		{"any", Any(), `null`, nil},
		{"missing", Object(Field("a", Int()).Required()), `{}`, []Violation{
			{Loc: []any{"body", "a"}, Msg: "Field required", Type: "missing"}}},
		{"optional absent", Object(Field("a", Int())), `{}`, nil},
		{"extra_forbidden case-sensitive", decisionBody, `{"Cliente_Ref":"c9f1a2b3c4d5","cliente_ref":"c9f1a2b3c4d5","contexto":{"canal":"push"}}`, []Violation{
			{Loc: []any{"body", "Cliente_Ref"}, Msg: "Extra inputs are not permitted", Type: "extra_forbidden", Input: "c9f1a2b3c4d5"}}},
		{"extra null input", Object(), `{"x":null}`, []Violation{
			{Loc: []any{"body", "x"}, Msg: "Extra inputs are not permitted", Type: "extra_forbidden", Input: JSONNull{}}}},
		{"allow extra", Object(Field("a", Int())).AllowExtra(), `{"a":1,"b":"x"}`, nil},
		{"required nullable null", Object(Field("a", Int().Nullable()).Required()), `{"a":null}`, nil},
		{"nullable object", Object(Field("a", Int()).Required()).Nullable(), `null`, nil},
		{"object null", Object(), `null`, []Violation{
			{Loc: []any{"body"}, Msg: "Input should be a valid dictionary or object to extract fields from", Type: "model_attributes_type", Input: JSONNull{}}}},
		{"nested missing", decisionBody, `{"cliente_ref":"c9f1a2b3c4d5","contexto":{}}`, []Violation{
			{Loc: []any{"body", "contexto", "canal"}, Msg: "Field required", Type: "missing"}}},
		{"nested not object", decisionBody, `{"cliente_ref":"c9f1a2b3c4d5","contexto":"push"}`, []Violation{
			{Loc: []any{"body", "contexto"}, Msg: "Input should be a valid dictionary or object to extract fields from", Type: "model_attributes_type", Input: "push"}}},
		{"every violation at once", decisionBody,
			`{"contexto":{"canal":"","campana_id":"a b","acciones_permitidas":[1,-1,"2"],"extra":1},"zz":true,"Contexto":{}}`,
			[]Violation{
				{Loc: []any{"body", "cliente_ref"}, Msg: "Field required", Type: "missing"},
				{Loc: []any{"body", "contexto", "canal"}, Msg: "String should have at least 1 character", Type: "string_too_short", Ctx: map[string]any{"min_length": 1}, Input: ""},
				{Loc: []any{"body", "contexto", "campana_id"}, Msg: "String should match pattern '" + IDPatternText + "'", Type: "string_pattern_mismatch", Ctx: map[string]any{"pattern": IDPatternText}, Input: "a b"},
				{Loc: []any{"body", "contexto", "acciones_permitidas", 1}, Msg: "Input should be greater than or equal to 0", Type: "greater_than_equal", Ctx: map[string]any{"ge": int64(0)}, Input: num("-1")},
				{Loc: []any{"body", "contexto", "acciones_permitidas", 2}, Msg: "Input should be a valid integer", Type: "int_type", Input: "2"},
				{Loc: []any{"body", "contexto", "extra"}, Msg: "Extra inputs are not permitted", Type: "extra_forbidden", Input: num("1")},
				{Loc: []any{"body", "zz"}, Msg: "Extra inputs are not permitted", Type: "extra_forbidden", Input: true},
				{Loc: []any{"body", "Contexto"}, Msg: "Extra inputs are not permitted", Type: "extra_forbidden", Input: map[string]any{}},
			}},
		{"decision ok", decisionBody, `{"cliente_ref":"c9f1a2b3c4d5","contexto":{"canal":"push","campana_id":"verano-2024","acciones_permitidas":[0,3]}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			got := Validate(tt.schema, v, "body")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate(%s) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestObjectCheck(t *testing.T) {
	oneOf := Object(
		Field("campana_id", ID()).Required(),
		Field("clientes", Array(ClienteRef()).Items(1, 500000).Nullable()),
		Field("segmento", AnyObject().Nullable()),
	).Check(func(v Value) string {
		a, b := v.Field("clientes"), v.Field("segmento")
		if (a.Present() && !a.IsNull()) == (b.Present() && !b.IsNull()) {
			return "pase exactamente uno de clientes o segmento"
		}
		return ""
	})
	tests := []struct {
		name string
		in   string
		want []Violation
	}{
		{"one", `{"campana_id":"c1","clientes":["c9f1a2b3c4d5"]}`, nil},
		{"other", `{"campana_id":"c1","segmento":{"todos":true},"clientes":null}`, nil},
		{"both", `{"campana_id":"c1","segmento":{"todos":true},"clientes":["c9f1a2b3c4d5"]}`, []Violation{
			{Loc: []any{"body"}, Msg: "Value error, pase exactamente uno de clientes o segmento", Type: "value_error",
				Input: map[string]any{"campana_id": "c1", "segmento": map[string]any{"todos": true}, "clientes": []any{"c9f1a2b3c4d5"}}}}},
		{"neither", `{"campana_id":"c1"}`, []Violation{
			{Loc: []any{"body"}, Msg: "Value error, pase exactamente uno de clientes o segmento", Type: "value_error",
				Input: map[string]any{"campana_id": "c1"}}}},
		// The check does not run while a member is wrong.
		{"member wrong", `{"campana_id":"c 1"}`, []Violation{
			{Loc: []any{"body", "campana_id"}, Msg: "String should match pattern '" + IDPatternText + "'", Type: "string_pattern_mismatch",
				Ctx: map[string]any{"pattern": IDPatternText}, Input: "c 1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := oneOf.Decode([]byte(tt.in), "body")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode(%s) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		in   string
		root []any
		want []Violation
	}{
		{"empty body", ``, []any{"body"}, []Violation{{Loc: []any{"body"}, Msg: "Field required", Type: "missing"}}},
		{"blank body", " \n", []any{"body"}, []Violation{{Loc: []any{"body"}, Msg: "Field required", Type: "missing"}}},
		{"invalid", `{"cliente_ref":}`, []any{"body"}, []Violation{{Loc: []any{"body", 15}, Msg: "JSON decode error", Type: "json_invalid",
			Ctx: map[string]any{"error": "Expecting value"}, Input: map[string]any{}}}},
		{"duplicate", `{"cliente_ref":"c9f1a2b3c4d5","cliente_ref":"c9f1a2b3c4d5","contexto":{"canal":"x"}}`, []any{"body"}, []Violation{
			{Loc: []any{"body", 30}, Msg: "JSON decode error", Type: "json_invalid", Ctx: map[string]any{"error": `Duplicate key "cliente_ref"`}, Input: map[string]any{}}}},
		{"trailing", `{"cliente_ref":"c9f1a2b3c4d5","contexto":{"canal":"x"}}{}`, []any{"body"}, []Violation{
			{Loc: []any{"body", 55}, Msg: "JSON decode error", Type: "json_invalid", Ctx: map[string]any{"error": "Extra data"}, Input: map[string]any{}}}},
		{"no root", `{"contexto":{"canal":"x"}}`, nil, []Violation{{Loc: []any{"cliente_ref"}, Msg: "Field required", Type: "missing"}}},
		{"long root", `{"contexto":{"canal":"x"}}`, []any{"a", "b", 1, "c", "d"}, []Violation{
			{Loc: []any{"a", "b", 1, "c", "d", "cliente_ref"}, Msg: "Field required", Type: "missing"}}},
		{"ok", ` {"cliente_ref":"c9f1a2b3c4d5","contexto":{"canal":"x"}} `, []any{"body"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := decisionBody.Decode([]byte(tt.in), tt.root...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestDecodeKeepsValue(t *testing.T) {
	v, bad := decisionBody.Decode([]byte(`{"cliente_ref":"c9f1a2b3c4d5","contexto":{"canal":"push","acciones_permitidas":[0,4]}}`), "body")
	if len(bad) != 0 {
		t.Fatalf("Decode: %v", bad)
	}
	var allowed []int64
	for _, it := range v.Field("contexto").Field("acciones_permitidas").Items() {
		allowed = append(allowed, it.Int())
	}
	got := []any{v.Field("cliente_ref").String(), v.Field("contexto").Field("canal").String(), v.Field("contexto").Field("campana_id").Present(), allowed}
	want := []any{"c9f1a2b3c4d5", "push", false, []int64{0, 4}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("typed access mismatch (-want +got):\n%s", diff)
	}
	// A body that breaks the schema still comes back for inspection.
	v, bad = decisionBody.Decode([]byte(`{"cliente_ref":"x"}`), "body")
	if len(bad) != 2 || v.Field("cliente_ref").String() != "x" {
		t.Errorf("Decode of an invalid body = %v, %v; want the value and 2 violations", v.JSON(), bad)
	}
}

func TestValidateAbsent(t *testing.T) {
	got := Validate(Int(), Value{}, "query", "limit")
	want := []Violation{{Loc: []any{"query", "limit"}, Msg: "Field required", Type: "missing"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Validate(absent) mismatch (-want +got):\n%s", diff)
	}
}

func TestValidateText(t *testing.T) {
	ref := ClienteRef()
	tests := []struct {
		in   string
		want []Violation
	}{
		{"c9f1a2b3c4d5", nil},
		{"5512345678", []Violation{{Loc: []any{"path", "cliente_ref"}, Msg: "Value error, " + phoneMessage, Type: "value_error", Input: "5512345678"}}},
		{"ab", []Violation{{Loc: []any{"path", "cliente_ref"}, Msg: "String should have at least 8 characters", Type: "string_too_short", Ctx: map[string]any{"min_length": 8}, Input: "ab"}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := ref.ValidateText(tt.in, "path", "cliente_ref")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ValidateText(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestBuildersDoNotShare(t *testing.T) {
	base := String()
	short := base.Len(1, 2)
	checked := base.Check(func(string) string { return "no" })
	v := mustParse(t, `"abcdef"`)
	got := []int{len(Validate(base, v)), len(Validate(short, v)), len(Validate(checked, v)), len(Validate(base.Nullable(), v))}
	if diff := cmp.Diff([]int{0, 1, 1, 0}, got); diff != "" {
		t.Errorf("violation counts [base short checked nullable] mismatch (-want +got):\n%s", diff)
	}
}

func TestObjectPanicsOnDuplicateField(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Object with a field declared twice did not panic")
		}
	}()
	Object(Field("a", Int()), Field("a", String()))
}

func TestViolationJSON(t *testing.T) {
	vs := []Violation{
		{Loc: []any{"body", "contexto", "canal"}, Msg: "Field required", Type: "missing"},
		{Loc: []any{"body", "acciones", 2, "id"}, Msg: "Input should be greater than or equal to 1", Type: "greater_than_equal", Ctx: map[string]any{"ge": int64(1)}, Input: num("0")},
		{Loc: []any{"body", "x"}, Msg: "Input should be a valid string", Type: "string_type", Input: JSONNull{}},
		{Msg: "m", Type: "value_error", Input: 0},
		{Loc: []any{"body", "valor"}, Msg: "Value error, x", Type: "value_error", Input: num("10.555")},
	}
	got, err := json.Marshal(vs)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"loc":["body","contexto","canal"],"msg":"Field required","type":"missing"},` +
		`{"loc":["body","acciones",2,"id"],"msg":"Input should be greater than or equal to 1","type":"greater_than_equal","ctx":{"ge":1},"input":0},` +
		`{"loc":["body","x"],"msg":"Input should be a valid string","type":"string_type","input":null},` +
		`{"loc":[],"msg":"m","type":"value_error","input":0},` +
		`{"loc":["body","valor"],"msg":"Value error, x","type":"value_error","input":10.555}]`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("json.Marshal mismatch (-want +got):\n%s", diff)
	}
}

func TestDotted(t *testing.T) {
	v := Violation{Loc: []any{"body", "eventos", 3, "extra", "margen"}}
	w := Violation{Loc: []any{"acciones", 2, "id"}}
	got := []string{v.Dotted(3), v.Dotted(0), v.Dotted(5), v.Dotted(-1), w.Dotted(0), Violation{}.Dotted(0)}
	want := []string{"extra.margen", "body.eventos.3.extra.margen", "", "body.eventos.3.extra.margen", "acciones.2.id", ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Dotted mismatch (-want +got):\n%s", diff)
	}
}

func TestConstructors(t *testing.T) {
	got := []Violation{
		Missing("body", "grant_type"),
		TooLong("body", "client_id", "xxxx", 3),
		PatternMismatch("path", "campana_id", "a b", IDPatternText),
		ValueError([]any{"body", "acciones", 1, "id"}, "id repetido en el catálogo", 7),
		ValueError([]any{"body"}, "sin input", nil),
	}
	want := []Violation{
		{Loc: []any{"body", "grant_type"}, Msg: "Field required", Type: "missing"},
		{Loc: []any{"body", "client_id"}, Msg: "String should have at most 3 characters", Type: "string_too_long", Ctx: map[string]any{"max_length": 3}, Input: "xxxx"},
		{Loc: []any{"path", "campana_id"}, Msg: "String should match pattern '" + IDPatternText + "'", Type: "string_pattern_mismatch", Ctx: map[string]any{"pattern": IDPatternText}, Input: "a b"},
		{Loc: []any{"body", "acciones", 1, "id"}, Msg: "Value error, id repetido en el catálogo", Type: "value_error", Input: 7},
		{Loc: []any{"body"}, Msg: "Value error, sin input", Type: "value_error"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("constructors mismatch (-want +got):\n%s", diff)
	}
}

func TestPurchaseEvent(t *testing.T) {
	v, bad := compraCat.Decode([]byte(purchaseEvent), "body")
	if len(bad) != 0 {
		t.Fatalf("Decode(purchaseEvent): %v", bad)
	}
	x := v.Field("extra")
	got := []any{v.Field("valor").Cents(), x.Field("margen").Cents(), x.Field("ticket_total").Cents(), x.Field("cantidad").Float(),
		v.Field("ts").Time().String(), v.Field("decision_id").IsNull()}
	want := []any{int64(123450), int64(23415), int64(299999), 3.0, "2024-05-01 18:34:56.789 +0000 UTC", true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("purchase event fields mismatch (-want +got):\n%s", diff)
	}

	// A bad event, validated on its own as POST /v1/eventos does, gives
	// campo paths through Dotted(0).
	ev := mustParse(t, `{"event_id":"e1","cliente_ref":"c9f1a2b3c4d5","ts":"2024-05-01T12:00:00","tipo":"COMPRA_CAT","clave":"x",
		"valor":10.555,"extra":{"ticket_id":"t1","margen":1.001,"Margen":1},"otro":1}`)
	var campos []string
	for _, viol := range compraCat.Validate(ev) {
		campos = append(campos, viol.Type+" "+viol.Dotted(0))
	}
	wantCampos := []string{"timezone_aware ts", "value_error valor", "value_error extra.margen", "extra_forbidden extra.Margen", "extra_forbidden otro"}
	if diff := cmp.Diff(wantCampos, campos); diff != "" {
		t.Errorf("event violations mismatch (-want +got):\n%s", diff)
	}
}

// TestCheckerReuse: a Checker validating one value after another returns
// what Validate returns for each, and the violations of one call are not
// changed by the next.
func TestCheckerReuse(t *testing.T) {
	s := Object(Field("a", Int().Min(1)).Required(), Field("b", String().Len(1, 3)))
	docs := []string{`{"a":0,"b":"long"}`, `{"b":""}`, `{"a":5}`, `{"a":"x","c":1}`, `{"a":1,"b":"ok"}`}
	var k Checker
	var got, want [][]Violation
	for _, d := range docs {
		v, err := Parse([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k.Validate(s, v, "body"))
		want = append(want, Validate(s, v, "body"))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("violations with one Checker (-want +got):\n%s", diff)
	}
}
