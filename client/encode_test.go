package client

import (
	"bytes"
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
