package jsonappend

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMarshal: Marshal is json.Marshal but for HTML escaping. The other
// tests take Marshal as encoding/json's reference form.
func TestMarshal(t *testing.T) {
	type doc struct {
		URL string    `json:"url"`
		N   []float64 `json:"n"`
		At  time.Time `json:"at"`
	}
	at := time.Date(2026, 11, 2, 12, 0, 0, 5, time.FixedZone("mx", -6*3600))
	got, err := Marshal(doc{"https://x/y?a=1&b=<2>", []float64{1e-7, 0.5}, at})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"url":"https://x/y?a=1&b=<2>","n":[1e-7,0.5],"at":"2026-11-02T12:00:00.000000005-06:00"}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("Marshal (-want +got):\n%s", diff)
	}
	plain := doc{"a\"b\\c\n\x00 \u2028 \xff ñ", []float64{0, 1e21, -2.5e-9}, at}
	got, err = Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(plain); !bytes.Equal(got, want) {
		t.Errorf("Marshal = %s, json.Marshal = %s", got, want)
	}
	if _, err := Marshal(math.NaN()); err == nil {
		t.Error("Marshal(NaN): no error")
	}
}

func TestString(t *testing.T) {
	for _, s := range []string{"", "nada", "a<b>&\"c\\\n\r\t\b\f\x01\x1f\x7f ñ \u2028\u2029 \xff end", "bad\xc3", "emoji 😀"} {
		want, _ := Marshal(s)
		if diff := cmp.Diff(string(want), string(String(nil, s))); diff != "" {
			t.Errorf("String(%q) (-want +got):\n%s", s, diff)
		}
	}
}

func TestFloat(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, 0.05, 1.0 / 3, 1e-6, 9.99e-7, 1e-7, 2.5e-9, 1e20, 1e21, -1e21,
		123456789012345678901234.0, math.SmallestNonzeroFloat64, math.MaxFloat64, -0.5} {
		want, _ := Marshal(f)
		got, ok := Float([]byte("x"), f)
		if !ok || string(got) != "x"+string(want) {
			t.Errorf("Float(%v) = %s, %v; want x%s", f, got, ok, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got, ok := Float([]byte("x"), f); ok || string(got) != "x" {
			t.Errorf("Float(%v) = %q, %v; want \"x\", false", f, got, ok)
		}
	}
}

func TestTime(t *testing.T) {
	at := time.Date(2026, 11, 2, 12, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		t  time.Time
		ok bool
	}{
		{at, true},
		{at.Truncate(time.Second), true},
		{at.In(time.FixedZone("mx", -6*3600)), true},
		{at.In(time.FixedZone("odd", 5*3600+30*60+17)), true},
		{at.In(time.FixedZone("23h", 23*3600+59*60)), true},
		{at.In(time.FixedZone("24h", 24*3600)), false},
		{at.In(time.FixedZone("-100h", -100*3600)), false},
		{time.Time{}, true},
		{time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), true},
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), false},
	} {
		want, err := Marshal(tc.t)
		if (err == nil) != tc.ok {
			t.Fatalf("encoding/json on %v: error %v, the test expects ok %v", tc.t, err, tc.ok)
		}
		got, ok := Time([]byte("x"), tc.t)
		if ok != tc.ok || !ok && string(got) != "x" || ok && string(got) != "x"+string(want) {
			t.Errorf("Time(%v) = %s, %v; want x%s, %v", tc.t, got, ok, want, tc.ok)
		}
	}
}

// FuzzAppend: String, Float and Time write what encoding/json writes
// without HTML escaping, and refuse exactly what it rejects.
func FuzzAppend(f *testing.F) {
	f.Add("a<b>&\"\\\n\x00\x1f", 0.5, int64(1700000000), int64(123456789), int32(-6*3600))
	f.Add("\xff\u2028\u2029 ñ 😀", 1e-9, int64(-62135596800), int64(0), int32(0))
	f.Add("", 1e21, int64(253402300800), int64(1), int32(24*3600))
	f.Fuzz(func(t *testing.T, s string, x float64, sec, nsec int64, offset int32) {
		want, _ := Marshal(s)
		if got := String([]byte("x"), s); !bytes.Equal(got[1:], want) {
			t.Fatalf("String(%q):\n got %s\nwant %s", s, got[1:], want)
		}
		want, err := Marshal(x)
		got, ok := Float([]byte("x"), x)
		if (err == nil) != ok || ok && !bytes.Equal(got[1:], want) || !ok && len(got) != 1 {
			t.Fatalf("Float(%v) = %s, %v; encoding/json %s, %v", x, got[1:], ok, want, err)
		}
		tm := time.Unix(sec, nsec).In(time.FixedZone("z", int(offset)))
		want, err = Marshal(tm)
		got, ok = Time([]byte("x"), tm)
		if (err == nil) != ok || ok && !bytes.Equal(got[1:], want) || !ok && len(got) != 1 {
			t.Fatalf("Time(%v) = %s, %v; encoding/json %s, %v", tm, got[1:], ok, want, err)
		}
	})
}
