package client

import (
	"bytes"
	"math"
	"strconv"
	"testing"

	"github.com/coupond/coupond/jsonappend"
)

// FuzzAppendDecisionRequest: the hand-written encoder writes what
// encoding/json writes without HTML escaping (the API's JSON form: "<", ">"
// and "&" as they are).
func FuzzAppendDecisionRequest(f *testing.F) {
	f.Add("c9f1a2b3d4e5", "push", "", []byte(nil), false)
	f.Add("a\"b\\c\n\x00\x1f<>&", "ca\u2028nal\u2029", "verano", []byte{0, 1, 255}, true)
	f.Add("\xff\xfe inválido ñ 😀", "\t\r\b\f", "x", []byte{}, true)
	f.Fuzz(func(t *testing.T, ref, canal, campana string, acciones []byte, withList bool) {
		r := PeticionDecision{ClienteRef: ref, Contexto: Contexto{Canal: canal, CampanaID: campana}}
		if withList {
			r.Contexto.AccionesPermitidas = []int{}
			for _, a := range acciones {
				r.Contexto.AccionesPermitidas = append(r.Contexto.AccionesPermitidas, int(a)*1000003-7)
			}
		}
		want, err := jsonappend.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendDecisionRequest(nil, &r); !bytes.Equal(got, want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}

// TestCents: float64 noise around a whole cent is dropped, anything else
// is kept for the server to judge.
func TestCents(t *testing.T) {
	var a, b = 0.1, 0.2 // variables: constant arithmetic would be exact
	tests := []struct {
		in   float64
		want string // as sent
	}{
		{a + b, "0.3"},
		{-(a + b), "-0.3"},
		{19.99 * float64(len("abc")), "59.97"},
		{0.305, "0.305"},
		{0.001, "0.001"},
		{1234567.125, "1.234567125e+06"},
		{1e300, "1e+300"},
		{math.Inf(1), "+Inf"},
		{math.NaN(), "NaN"},
		{0, "0"},
	}
	for _, tt := range tests {
		if got := strconv.FormatFloat(cents(tt.in), 'g', -1, 64); got != tt.want {
			t.Errorf("cents(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
