package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func mustParse(t testing.TB, s string) Value {
	t.Helper()
	v, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	return v
}

func TestValueAccessors(t *testing.T) {
	v := mustParse(t, `{"s":"t\u00e9xto","n":42,"f":2.5,"m":10.55,"b":true,"z":null,
		"ts":"2024-05-01T12:34:56.5-06:00","a":[1,[2,3],{"k":"v"}],"o":{"x":{"y":"deep"}}}`)
	type got struct {
		S, Missing, NotString     string
		N, NotInt, FracInt        int64
		F                         float64
		M, NotCents               int64
		B, NotBool                bool
		ZNull, ZPresent, MPresent bool
		TS                        time.Time
		BadTS                     time.Time
		Len, ALen, SLen           int
		Index1, Index9            string
		Deep                      string
		Kinds                     []Kind
		NumText                   string
	}
	g := got{
		S:         v.Field("s").String(),
		Missing:   v.Field("nope").String(),
		NotString: v.Field("n").String(),
		N:         v.Field("n").Int(),
		NotInt:    v.Field("s").Int(),
		FracInt:   v.Field("f").Int(),
		F:         v.Field("f").Float(),
		M:         v.Field("m").Cents(),
		NotCents:  v.Field("s").Cents(),
		B:         v.Field("b").Bool(),
		NotBool:   v.Field("s").Bool(),
		ZNull:     v.Field("z").IsNull(),
		ZPresent:  v.Field("z").Present(),
		MPresent:  v.Field("nope").Present(),
		TS:        v.Field("ts").Time(),
		BadTS:     v.Field("s").Time(),
		Len:       v.Len(),
		ALen:      v.Field("a").Len(),
		SLen:      v.Field("s").Len(),
		Index1:    string(v.Field("a").Index(1).JSON()),
		Index9:    string(v.Field("a").Index(9).JSON()),
		Deep:      v.Field("o").Field("x").Field("y").String(),
		NumText:   v.Field("f").NumberText(),
	}
	for _, name := range []string{"s", "n", "b", "z", "a", "o", "nope"} {
		g.Kinds = append(g.Kinds, v.Field(name).Kind())
	}
	want := got{
		S: "téxto", N: 42, F: 2.5, M: 1055, B: true, ZNull: true, ZPresent: true,
		TS:  time.Date(2024, 5, 1, 18, 34, 56, 5e8, time.UTC),
		Len: 9, ALen: 3, Index1: `[2,3]`, Index9: `null`, Deep: "deep",
		Kinds:   []Kind{KindString, KindNumber, KindBool, KindNull, KindArray, KindObject, KindAbsent},
		NumText: "2.5",
	}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("accessors mismatch (-want +got):\n%s", diff)
	}
}

func TestValueZeroIsAbsent(t *testing.T) {
	var v Value
	got := []any{v.Present(), v.IsNull(), v.Kind(), v.Field("a").Present(), v.Index(0).Present(), v.Len(),
		v.String(), v.Int(), v.Cents(), v.Float(), v.Bool(), v.Time().IsZero(), v.Any(), string(v.JSON())}
	want := []any{false, false, KindAbsent, false, false, 0, "", int64(0), int64(0), 0.0, false, true, nil, "null"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("zero Value mismatch (-want +got):\n%s", diff)
	}
	for range v.Items() {
		t.Error("Items of the zero Value yielded")
	}
	for range v.Members() {
		t.Error("Members of the zero Value yielded")
	}
}

func TestItemsAndMembers(t *testing.T) {
	v := mustParse(t, `{"b":[10,20,30],"a":"x","c":{}}`)
	var items []int64
	for i, it := range v.Field("b").Items() {
		items = append(items, int64(i)*1000+it.Int())
	}
	var keys []string
	for k, m := range v.Members() {
		keys = append(keys, k+"="+string(m.JSON()))
	}
	// Breaking out of the loops stops the iteration.
	n := 0
	for range v.Field("b").Items() {
		n++
		break
	}
	for range v.Members() {
		n++
		break
	}
	got := struct {
		Items []int64
		Keys  []string
		N     int
	}{items, keys, n}
	want := struct {
		Items []int64
		Keys  []string
		N     int
	}{[]int64{10, 1020, 2030}, []string{`b=[10,20,30]`, `a="x"`, `c={}`}, 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("iteration mismatch (-want +got):\n%s", diff)
	}
}

func TestIntAndCents(t *testing.T) {
	tests := []struct {
		lit          string
		int, cents   int64
		wantInt, cOK bool
	}{
		{"0", 0, 0, true, true},
		{"-0", 0, 0, true, true},
		{"7", 7, 700, true, true},
		{"5.0", 5, 500, true, true},
		{"1e2", 100, 10000, true, true},
		{"1E+2", 100, 10000, true, true},
		{"10.5", 0, 1050, false, true},
		{"10.55", 0, 1055, false, true},
		{"10.550", 0, 1055, false, true},
		{"10.555", 0, 0, false, false},
		{"1.5e-1", 0, 15, false, true},
		{"1e-2", 0, 1, false, true},
		{"1e-3", 0, 0, false, false},
		{"-0.01", 0, -1, false, true},
		{"-12.34", 0, -1234, false, true},
		{"9223372036854775807", math.MaxInt64, 0, true, false},
		{"9223372036854775808", 0, 0, false, false},
		{"-9223372036854775808", math.MinInt64, 0, true, false},
		{"-9223372036854775809", 0, 0, false, false},
		{"92233720368547758.07", 0, math.MaxInt64, false, true},
		{"92233720368547758.08", 0, 0, false, false},
		{"-92233720368547758.08", 0, math.MinInt64, false, true},
		{"0.1e1", 1, 100, true, true},
		{"123456789012345678901234567890", 0, 0, false, false},
		{"1e400", 0, 0, false, false},
		{"1e-400", 0, 0, false, false},
		{"0e-400", 0, 0, true, true},
		{"1e99999999999999999999", 0, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.lit, func(t *testing.T) {
			v := mustParse(t, tt.lit)
			d := readDecimal(tt.lit)
			_, ierr := d.scaled(0)
			_, cerr := d.scaled(2)
			got := []any{v.Int(), ierr == numOK, v.Cents(), cerr == numOK}
			want := []any{tt.int, tt.wantInt, tt.cents, tt.cOK}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Int/Cents of %s mismatch [int ok cents ok] (-want +got):\n%s", tt.lit, diff)
			}
		})
	}
}

// TestFloatZeroHasNoSign: every spelling of zero reads +0, which encodes
// as 0 (a -0 was stored and echoed as -0).
func TestFloatZeroHasNoSign(t *testing.T) {
	for _, lit := range []string{"0", "-0", "-0.0", "-0e5", "0.000", "-1e-400"} {
		f := mustParse(t, lit).Float()
		if f != 0 || math.Signbit(f) {
			t.Errorf("Float of %s = %v (sign bit %v), want +0", lit, f, math.Signbit(f))
		}
	}
	if f := mustParse(t, "-0.5").Float(); f != -0.5 {
		t.Errorf("Float of -0.5 = %v", f)
	}
}

func TestCentsText(t *testing.T) {
	got := []string{centsText(0), centsText(5), centsText(50), centsText(1234), centsText(-1), centsText(100_000_000_000), centsText(math.MaxInt64), centsText(math.MinInt64)}
	want := []string{"0", "0.05", "0.5", "12.34", "-0.01", "1000000000", "92233720368547758.07", "-92233720368547758.08"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("centsText mismatch (-want +got):\n%s", diff)
	}
}

func TestAny(t *testing.T) {
	v := mustParse(t, `{"a":[1,2.50,"x",null,true],"b":{"c":false},"d":-1e3}`)
	want := map[string]any{
		"a": []any{json.Number("1"), json.Number("2.50"), "x", nil, true},
		"b": map[string]any{"c": false},
		"d": json.Number("-1e3"),
	}
	if diff := cmp.Diff(want, v.Any()); diff != "" {
		t.Errorf("Any mismatch (-want +got):\n%s", diff)
	}
}

func TestMarshalJSON(t *testing.T) {
	v := mustParse(t, `{"z":1.50,"a":"<&>"}`)
	got, err := json.Marshal(struct {
		V Value `json:"v"`
		W Value `json:"w"`
	}{V: v})
	if err != nil {
		t.Fatal(err)
	}
	// encoding/json compacts and HTML-escapes what a Marshaler returns.
	if diff := cmp.Diff(`{"v":{"a":"\u003c\u0026\u003e","z":1.5},"w":null}`, string(got)); diff != "" {
		t.Errorf("json.Marshal mismatch (-want +got):\n%s", diff)
	}
}

func TestParseTimestamp(t *testing.T) {
	utc := func(y int, mo time.Month, d, h, mi, s, ns int) time.Time {
		return time.Date(y, mo, d, h, mi, s, ns, time.UTC)
	}
	tests := []struct {
		in     string
		want   time.Time
		reason string
		noZone bool
	}{
		{in: "2024-05-01T12:34:56Z", want: utc(2024, 5, 1, 12, 34, 56, 0)},
		{in: "2024-05-01t12:34:56z", want: utc(2024, 5, 1, 12, 34, 56, 0)},
		{in: "2024-05-01 12:34:56+00:00", want: utc(2024, 5, 1, 12, 34, 56, 0)},
		{in: "2024-05-01T12:34:56.123456789-06:00", want: utc(2024, 5, 1, 18, 34, 56, 123456789)},
		{in: "2024-05-01T12:34:56,5+0530", want: utc(2024, 5, 1, 7, 4, 56, 5e8)},
		{in: "2024-05-01T23:30-01:00", want: utc(2024, 5, 2, 0, 30, 0, 0)},
		{in: "2024-02-29T00:00:00Z", want: utc(2024, 2, 29, 0, 0, 0, 0)},
		{in: "2000-02-29T00:00:00Z", want: utc(2000, 2, 29, 0, 0, 0, 0)},
		{in: "2024-05-01T00:00:00-00:00", want: utc(2024, 5, 1, 0, 0, 0, 0)},
		{in: "2024-05-01", noZone: true},
		{in: "2024-05-01T12:34:56", noZone: true},
		{in: "2024-05-01T12:34:56.789", noZone: true},
		{in: "2024-05-01T12:34", noZone: true},
		{in: "", reason: "input is too short"},
		{in: "2024-5-1T00:00Z", reason: "invalid date separator, expected `-`"},
		{in: "2024-05-1xT00:00Z", reason: "invalid character in day"},
		{in: "20x4-05-01T00:00:00Z", reason: "invalid character in year"},
		{in: "2024/05/01T00:00:00Z", reason: "invalid date separator, expected `-`"},
		{in: "2024-13-01T00:00:00Z", reason: "month value is outside expected range of 1-12"},
		{in: "2023-02-29T00:00:00Z", reason: "day value is outside expected range"},
		{in: "1900-02-29T00:00:00Z", reason: "day value is outside expected range"},
		{in: "2024-04-31T00:00:00Z", reason: "day value is outside expected range"},
		{in: "2024-05-01X00:00:00Z", reason: "invalid datetime separator, expected `T`, `t` or space"},
		{in: "2024-05-01T0", reason: "input is too short"},
		{in: "2024-05-01T24:00:00Z", reason: "hour value is outside expected range of 0-23"},
		{in: "2024-05-01T12:60:00Z", reason: "minute value is outside expected range of 0-59"},
		{in: "2024-05-01T12:59:60Z", reason: "second value is outside expected range of 0-59"},
		{in: "2024-05-01T12.30:00Z", reason: "invalid time separator, expected `:`"},
		{in: "2024-05-01T12:30:00.Z", reason: "invalid character in second fraction"},
		{in: "2024-05-01T12:30:00.1234567890Z", reason: "second fraction has more than 9 digits"},
		{in: "2024-05-01T12:30:00+24:00", reason: "timezone offset must be less than 24 hours"},
		{in: "2024-05-01T12:30:00+05", reason: "invalid timezone offset"},
		{in: "2024-05-01T12:30:00Z ", reason: "unexpected extra characters at the end of the input"},
		{in: "2024-05-01T12:30:00 UTC", reason: "invalid timezone sign or extra characters"},
		{in: "2024-05-01T12:30:00Z[America/Mexico_City]", reason: "unexpected extra characters at the end of the input"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, reason, noZone := parseTimestamp(tt.in)
			if diff := cmp.Diff([]any{tt.want, tt.reason, tt.noZone}, []any{got, reason, noZone}); diff != "" {
				t.Errorf("parseTimestamp(%q) mismatch [time reason noZone] (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestValidIDAndPhone(t *testing.T) {
	long := "a"
	for len(long) < 128 {
		long += "b"
	}
	tests := []struct {
		in        string
		id, phone bool
	}{
		{"", false, false},
		{"a", true, false},
		{"A1_b.c:d-e", true, false},
		{"_abc", false, false},
		{"-abc", false, false},
		{".abc", false, false},
		{"abc def", false, false},
		{"abc/def", false, false},
		{"user@example.com", false, false},
		{"ñandú", false, false},
		{long, true, false},
		{long + "c", false, false},
		{"5512345678", true, true},
		{"55-1234-5678", true, true},
		{"55.1234.5678", true, true},
		{"5215512345678", true, true},
		{"52155123456789", true, false},
		{"551234567", true, false},
		{"+525512345678", false, false},
		{"55 1234 5678", false, false},
		{"55-1234-567a", true, false},
		{"c9f1a2b3c4d5e6f7", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := []bool{ValidID(tt.in), LooksLikePhone(tt.in)}
			if diff := cmp.Diff([]bool{tt.id, tt.phone}, got); diff != "" {
				t.Errorf("[ValidID LooksLikePhone](%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// TestWriteTo: WriteTo writes AppendJSON's canonical bytes, a document
// larger than its buffer included, in writes of about spillSize (not one
// copy of the whole document).
func TestWriteTo(t *testing.T) {
	var big strings.Builder
	big.WriteString(`{"z":[`)
	for i := range 30000 {
		if i > 0 {
			big.WriteString(", ")
		}
		fmt.Fprintf(&big, `"cliente-%07d"`, i)
	}
	big.WriteString(`],"a":{"y":1.50,"b":[1e2,{"d":null,"c":true}]}}`)
	tests := []struct {
		name, doc string
		maxWrite  int
	}{
		{name: "scalar", doc: `1.50`, maxWrite: 3},
		{name: "small object", doc: `{"z":1.50,"a":["<&>",  null]}`, maxWrite: 64},
		{name: "large array", doc: big.String(), maxWrite: 2 * spillSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := mustParse(t, tc.doc)
			w := &recordWriter{}
			n, err := v.WriteTo(w)
			if err != nil {
				t.Fatal(err)
			}
			want := v.JSON()
			if diff := cmp.Diff(string(want), w.buf.String()); diff != "" {
				t.Errorf("WriteTo mismatch (-want +got):\n%s", diff)
			}
			if n != int64(len(want)) || w.max > tc.maxWrite {
				t.Errorf("WriteTo: %d bytes, largest write %d; want %d, at most %d", n, w.max, len(want), tc.maxWrite)
			}
		})
	}
}

// recordWriter keeps what is written and the largest write.
type recordWriter struct {
	buf bytes.Buffer
	max int
}

func (w *recordWriter) Write(p []byte) (int, error) {
	w.max = max(w.max, len(p))
	return w.buf.Write(p)
}
