package schema

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJSONSchema(t *testing.T) {
	s := Object(
		Field("id", ID()).Required(),
		Field("ref", ClienteRef()),
		Field("n", Int().Min(0).Nullable()),
		Field("x", Number().Range(0, 100)),
		Field("m", Money().Range(-500, 100_000)).Required(),
		Field("ok", Bool()),
		Field("ts", Timestamp().Nullable()),
		Field("url", URL("https")),
		Field("tipo", String().Enum("a", "b").Nullable()),
		Field("list", Array(String().Len(1, 3)).Items(1, 10)),
		Field("free", AnyObject().Nullable()),
		Field("any", Any()),
		Field("open", Object(Field("k", String())).AllowExtra().Doc("abierto")),
	)
	data, err := json.Marshal(JSONSchema(s))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	props := got["properties"].(map[string]any)
	want := map[string]any{
		"id":   map[string]any{"type": "string", "minLength": 1.0, "maxLength": 128.0, "pattern": IDPatternText},
		"ref":  map[string]any{"type": "string", "minLength": 8.0, "maxLength": 128.0, "pattern": IDPatternText, "description": clienteRefDoc},
		"n":    map[string]any{"type": []any{"integer", "null"}, "format": "int64", "minimum": 0.0},
		"x":    map[string]any{"type": "number", "minimum": 0.0, "maximum": 100.0},
		"ok":   map[string]any{"type": "boolean"},
		"tipo": map[string]any{"type": []any{"string", "null"}, "enum": []any{"a", "b", nil}},
		"list": map[string]any{"type": "array", "minItems": 1.0, "maxItems": 10.0, "items": map[string]any{"type": "string", "minLength": 1.0, "maxLength": 3.0}},
		"free": map[string]any{"type": []any{"object", "null"}},
		"any":  map[string]any{},
		"open": map[string]any{"type": "object", "description": "abierto", "properties": map[string]any{"k": map[string]any{"type": "string"}}},
	}
	for name, w := range want {
		if diff := cmp.Diff(w, props[name]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	m := props["m"].(map[string]any)
	if m["type"] != "number" || m["minimum"] != -5.0 || m["maximum"] != 1000.0 || m["x-max-decimals"] != 2.0 {
		t.Errorf("money: %v", m)
	}
	ts := props["ts"].(map[string]any)
	if ts["format"] != "date-time" || !cmp.Equal(ts["type"], []any{"string", "null"}) {
		t.Errorf("timestamp: %v", ts)
	}
	u := props["url"].(map[string]any)
	if u["format"] != "uri" || u["pattern"] != "^(?:[hH][tT][tT][pP][sS])://" || u["maxLength"] != 2083.0 {
		t.Errorf("url: %v", u)
	}
	if got["additionalProperties"] != false || !cmp.Equal(got["required"], []any{"id", "m"}) {
		t.Errorf("object: additionalProperties %v required %v", got["additionalProperties"], got["required"])
	}
	// The result is the caller's: changing it does not change the next one.
	first := JSONSchema(s)
	first["properties"].(map[string]any)["id"].(map[string]any)["pattern"] = "x"
	if JSONSchema(s)["properties"].(map[string]any)["id"].(map[string]any)["pattern"] != IDPatternText {
		t.Error("JSONSchema results share state")
	}
	if len(ErrorTypes()) < 20 {
		t.Error("ErrorTypes too short")
	}
}
