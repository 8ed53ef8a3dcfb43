package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// segCustomers are the customers the segment tests filter, at featNow.
func segCustomers(t *testing.T) map[string]*Features {
	t.Helper()
	return map[string]*Features{
		// Bought 10 days ago (2 tickets in 90 days), 300 MXN in 30 days.
		"reciente": applyAll(t,
			buy(daysAgo(10), "T1", "abarrotes", 30000, 6000),
			buy(daysAgo(60), "T2", "bebidas", 10000, 1000),
		),
		// Last bought 45 days ago.
		"tibio": applyAll(t, buy(daysAgo(45), "T1", "abarrotes", 5000, 500)),
		// Last bought 200 days ago, opted out of every channel.
		"dormido": applyAll(t, buy(daysAgo(200), "T1", "bebidas", 5000, 500), baja(daysAgo(100), BajaComunicaciones, "")),
		// Signed up, never bought.
		"nuevo": applyAll(t, alta(daysAgo(3), "app", "")),
		// No history at all.
		"vacio": nil,
	}
}

func TestSegmentMatch(t *testing.T) {
	customers := segCustomers(t)
	tests := []struct {
		segment string
		want    []string // the customers it matches, sorted
	}{
		{`{"todos":true}`, []string{"dormido", "nuevo", "reciente", "tibio", "vacio"}},
		{`{"<=":{"recencia_dias":30}}`, []string{"reciente"}},
		{`{"<":{"recencia_dias":10}}`, nil},
		{`{"<=":{"recencia_dias":10}}`, []string{"reciente"}},
		{`{">":{"recencia_dias":90}}`, []string{"dormido", "nuevo", "vacio"}}, // never bought: 10000 days
		{`{">=":{"gasto_30d_mxn":300}}`, []string{"reciente"}},
		{`{"==":{"frecuencia_90d":2}}`, []string{"reciente"}},
		{`{"!=":{"frecuencia_90d":0}}`, []string{"reciente", "tibio"}},
		{`{"==":{"baja_comunicaciones":1}}`, []string{"dormido"}},
		{`{"y":[{">":{"tickets_total":0}},{">":{"recencia_dias":30}}]}`, []string{"dormido", "tibio"}},
		{`{"o":[{"<=":{"recencia_dias":30}},{"<=":{"antiguedad_dias":7}}]}`, []string{"nuevo", "reciente", "vacio"}}, // no history: antiguedad 0
		{`{"no":{"<=":{"recencia_dias":30}}}`, []string{"dormido", "nuevo", "tibio", "vacio"}},
		{`{"y":[{"no":{"==":{"baja_comunicaciones":1}}},{"o":[{">":{"tickets_total":0}},{"==":{"antiguedad_dias":3}}]}]}`, []string{"nuevo", "reciente", "tibio"}},
		{`{">=":{"cuota_categoria:abarrotes":0.5}}`, []string{"reciente", "tibio"}},
		{`{">":{"cuota_categoria:no-existe":0}}`, nil},
		{`{"y":[{"<=":{"recencia_dias":30.5}}]}`, []string{"reciente"}},
	}
	for _, tt := range tests {
		t.Run(tt.segment, func(t *testing.T) {
			seg, err := ParseSegmentJSON([]byte(tt.segment))
			if err != nil {
				t.Fatalf("ParseSegmentJSON: %v", err)
			}
			var got []string
			for _, name := range []string{"dormido", "nuevo", "reciente", "tibio", "vacio"} {
				if seg.Match(customers[name], featNow) {
					got = append(got, name)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("matches (-want +got):\n%s", diff)
			}
			if want := tt.segment == `{"todos":true}`; seg.Todos() != want {
				t.Errorf("Todos() = %v, want %v", seg.Todos(), want)
			}
		})
	}
}

func TestSegmentWindowRollsOver(t *testing.T) {
	seg, err := ParseSegmentJSON([]byte(`{">=":{"frecuencia_30d":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	f := applyAll(t, buy(daysAgo(0), "T1", "a", 100, 10))
	for _, tt := range []struct {
		now  time.Time
		want bool
	}{
		{featNow, true},
		{featNow.AddDate(0, 0, 29), true},
		{featNow.AddDate(0, 0, 30), false},
		{featNow.AddDate(0, 0, 31), false},
	} {
		if got := seg.Match(f, tt.now); got != tt.want {
			t.Errorf("Match at %s = %v, want %v", tt.now.Format(time.DateOnly), got, tt.want)
		}
	}
}

func TestParseSegmentDecodedInputs(t *testing.T) {
	// ParseSegment takes what encoding/json produces, with or without
	// UseNumber, and numbers Go code builds.
	inputs := []any{
		map[string]any{"<=": map[string]any{"recencia_dias": 30.0}},
		map[string]any{"<=": map[string]any{"recencia_dias": json.Number("30")}},
		map[string]any{"<=": map[string]any{"recencia_dias": 30}},
		map[string]any{"<=": map[string]any{"recencia_dias": int64(30)}},
	}
	f := applyAll(t, buy(daysAgo(30), "T1", "a", 100, 10))
	for _, in := range inputs {
		seg, err := ParseSegment(in)
		if err != nil {
			t.Errorf("ParseSegment(%#v): %v", in, err)
			continue
		}
		if !seg.Match(f, featNow) || seg.Match(f, featNow.AddDate(0, 0, 1)) {
			t.Errorf("ParseSegment(%#v) does not compare recencia_dias <= 30", in)
		}
	}
}

func TestParseSegmentErrors(t *testing.T) {
	type viol struct {
		Path, Type, Feature string
	}
	tests := []struct {
		name    string
		segment string
		want    []viol
	}{
		{"unknown feature", `{"y":[{">":{"tickets_total":0}},{"<=":{"recencia_dia":30}}]}`,
			[]viol{{"segmento.y.1.<=", "value_error", "recencia_dia"}}},
		{"unknown operator", `{"<>":{"recencia_dias":30}}`, []viol{{"segmento.<>", "extra_forbidden", ""}}},
		{"not an object", `[1]`, []viol{{"segmento", "dict_type", ""}}},
		{"empty object", `{}`, []viol{{"segmento", "value_error", ""}}},
		{"two operators", `{"<":{"recencia_dias":3},">":{"recencia_dias":1}}`, []viol{{"segmento", "value_error", ""}}},
		{"two features", `{"<":{"recencia_dias":3,"tickets_total":1}}`, []viol{{"segmento.<", "value_error", ""}}},
		{"comparison of a non-object", `{"<":3}`, []viol{{"segmento.<", "dict_type", ""}}},
		{"string value", `{"<":{"recencia_dias":"3"}}`, []viol{{"segmento.<.recencia_dias", "float_type", "recencia_dias"}}},
		{"bool value", `{"<":{"recencia_dias":true}}`, []viol{{"segmento.<.recencia_dias", "float_type", "recencia_dias"}}},
		// Beyond float64: finite_number, as server/schema answers it for
		// any number field, not "not a number".
		{"number too large", `{"<":{"recencia_dias":1e400}}`, []viol{{"segmento.<.recencia_dias", "finite_number", "recencia_dias"}}},
		{"number too small", `{">":{"gasto_total_mxn":-2e308}}`, []viol{{"segmento.>.gasto_total_mxn", "finite_number", "gasto_total_mxn"}}},
		{"todos false", `{"todos":false}`, []viol{{"segmento.todos", "value_error", ""}}},
		{"todos not bool", `{"todos":1}`, []viol{{"segmento.todos", "bool_type", ""}}},
		{"todos nested", `{"no":{"todos":true}}`, []viol{{"segmento.no.todos", "value_error", ""}}},
		{"y not a list", `{"y":{"<":{"recencia_dias":3}}}`, []viol{{"segmento.y", "list_type", ""}}},
		{"empty o", `{"o":[]}`, []viol{{"segmento.o", "too_short", ""}}},
		{"empty category", `{"<":{"cuota_categoria:":0.5}}`, []viol{{"segmento.<", "value_error", "cuota_categoria:"}}},
		{"every violation", `{"o":[{"<":{"x":1}},{"no":5},{">":{"recencia_dias":null}}]}`, []viol{
			{"segmento.o.0.<", "value_error", "x"},
			{"segmento.o.1.no", "dict_type", ""},
			{"segmento.o.2.>.recencia_dias", "float_type", "recencia_dias"},
		}},
		{"invalid JSON", `{"<":`, []viol{{"segmento", "json_invalid", ""}}},
		{"trailing data", `{"todos":true} {}`, []viol{{"segmento", "json_invalid", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seg, err := ParseSegmentJSON([]byte(tt.segment))
			var se *SegmentError
			if !errors.As(err, &se) {
				t.Fatalf("ParseSegmentJSON(%s) = %v, %v; want a *SegmentError", tt.segment, seg, err)
			}
			var got []viol
			for _, v := range se.Violations {
				got = append(got, viol{v.Path(), v.Type, v.Feature})
				if v.Msg == "" || v.Loc[0] != "segmento" {
					t.Errorf("violation %+v: empty message or loc not starting with segmento", v)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(err.Error(), "engine: "+tt.want[0].Path+": ") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

func TestParseSegmentLocTypes(t *testing.T) {
	_, err := ParseSegmentJSON([]byte(`{"y":[{"no":{"<=":{"recencia_dia":30}}}]}`))
	var se *SegmentError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v", err)
	}
	want := []any{"segmento", "y", 0, "no", "<="}
	if diff := cmp.Diff(want, se.Violations[0].Loc); diff != "" {
		t.Errorf("Loc (-want +got):\n%s", diff)
	}
	if !strings.Contains(se.Violations[0].Msg, "recencia_dia") {
		t.Errorf("Msg %q does not name the feature", se.Violations[0].Msg)
	}
}

func TestParseSegmentLimits(t *testing.T) {
	nest := func(depth int) string {
		return strings.Repeat(`{"no":`, depth-1) + `{"<":{"recencia_dias":1}}` + strings.Repeat(`}`, depth-1)
	}
	if _, err := ParseSegmentJSON([]byte(nest(SegmentMaxDepth))); err != nil {
		t.Errorf("depth %d: %v", SegmentMaxDepth, err)
	}
	_, err := ParseSegmentJSON([]byte(nest(SegmentMaxDepth + 1)))
	var se *SegmentError
	if !errors.As(err, &se) || len(se.Violations) != 1 || se.Violations[0].Type != "value_error" || len(se.Violations[0].Loc) != SegmentMaxDepth+1 {
		t.Errorf("depth %d: %v", SegmentMaxDepth+1, err)
	}

	wide := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = `{"<":{"recencia_dias":1}}`
		}
		return `{"o":[` + strings.Join(items, ",") + `]}`
	}
	if _, err := ParseSegmentJSON([]byte(wide(SegmentMaxNodes - 1))); err != nil {
		t.Errorf("%d objects: %v", SegmentMaxNodes, err)
	}
	_, err = ParseSegmentJSON([]byte(wide(SegmentMaxNodes)))
	if !errors.As(err, &se) || len(se.Violations) != 1 || se.Violations[0].Path() != "segmento" {
		t.Errorf("%d objects: %v", SegmentMaxNodes+1, err)
	}

	bad := func(n int) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf(`{"<":{"x%d":1}}`, i)
		}
		return `{"o":[` + strings.Join(items, ",") + `]}`
	}
	_, err = ParseSegmentJSON([]byte(bad(200)))
	if !errors.As(err, &se) || len(se.Violations) != segMaxViolations {
		t.Errorf("200 unknown features: %d violations, want %d", len(se.Violations), segMaxViolations)
	}
}

// TestParseSegmentHugeRefusedCheaply: a segment far over the limits is
// refused before it is decoded. It was decoded whole into Go values first
// (about 140 bytes of memory per byte of a list of numbers): one request
// within the batch endpoint's 96 MB body limit asked for gigabytes.
func TestParseSegmentHugeRefusedCheaply(t *testing.T) {
	huge := []byte(`{"y":[` + strings.Repeat(`1,`, 2<<20) + `1]}`) // 4 MiB
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseSegmentJSON(huge)
	runtime.ReadMemStats(&after)
	var se *SegmentError
	if !errors.As(err, &se) || len(se.Violations) != 1 || se.Violations[0].Path() != "segmento" || se.Violations[0].Type != "value_error" {
		t.Fatalf("4 MiB segment: %v, want one value_error at segmento", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("refusing a 4 MiB segment allocated %d MiB, want under 1 MiB", got>>20)
	}

	// The largest segment the limits admit still parses: SegmentMaxNodes
	// objects naming a category of 200 characters.
	items := make([]string, SegmentMaxNodes-1)
	for i := range items {
		items[i] = fmt.Sprintf(`{">=":{"cuota_categoria:%0200d":0.123456789}}`, i)
	}
	big := []byte(`{"o":[` + strings.Join(items, ",") + `]}`)
	if _, err := ParseSegmentJSON(big); err != nil {
		t.Errorf("%d conditions of %d bytes in all: %v", SegmentMaxNodes, len(big), err)
	}
}

func FuzzParseSegmentJSON(f *testing.F) {
	f.Add([]byte(`{"todos":true}`))
	f.Add([]byte(`{"y":[{"<=":{"recencia_dias":30}},{"no":{">":{"cuota_categoria:x":0.5}}}]}`))
	f.Add([]byte(`{"o":[{"<":{"x":1}},{"no":5}]}`))
	cust := applyAll(f, yearOfWeeklyPurchases()...)
	f.Fuzz(func(t *testing.T, b []byte) {
		seg, err := ParseSegmentJSON(b)
		if err != nil {
			var se *SegmentError
			if !errors.As(err, &se) || len(se.Violations) == 0 || len(se.Violations) > segMaxViolations {
				t.Fatalf("error %v is not a well-formed *SegmentError", err)
			}
			return
		}
		seg.Match(cust, featNow)
		seg.Match(nil, featNow)
	})
}

func BenchmarkSegmentMatch(b *testing.B) {
	seg, err := ParseSegmentJSON([]byte(`{"y":[{"<=":{"recencia_dias":30}},{">=":{"gasto_90d_mxn":500}},{"no":{"==":{"baja_comunicaciones":1}}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	f := applyAll(b, yearOfWeeklyPurchases()...)
	b.ReportAllocs()
	for b.Loop() {
		seg.Match(f, featNow)
	}
}

// TestSegNumber: the numbers a segment accepts are a json.Number and the
// values of Go's predeclared integer and float types, nothing else.
func TestSegNumber(t *testing.T) {
	type myInt int
	for _, tc := range []struct {
		v    any
		want float64
		ok   bool
	}{
		{float64(1.5), 1.5, true}, {float32(0.25), 0.25, true}, {json.Number("2e3"), 2000, true},
		{int(-3), -3, true}, {int8(-8), -8, true}, {int16(16), 16, true}, {int32(-32), -32, true}, {int64(1 << 40), 1 << 40, true},
		{uint(3), 3, true}, {uint8(8), 8, true}, {uint16(16), 16, true}, {uint32(32), 32, true}, {uint64(1 << 63), 1 << 63, true},
		{json.Number("x"), 0, false}, {nil, 0, false}, {"1", 0, false}, {true, 0, false},
		{myInt(1), 0, false}, {uintptr(1), 0, false}, {complex(1, 0), 0, false},
	} {
		got, ok := segNumber(tc.v)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("segNumber(%#v) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}
