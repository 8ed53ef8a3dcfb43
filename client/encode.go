package client

import (
	"strconv"

	"github.com/coupond/coupond/jsonappend"
)

// appendDecisionRequest appends the JSON of r, byte for byte what
// encoding/json writes for it without HTML escaping, the API's JSON form
// (FuzzAppendDecisionRequest checks), without
// reflection or a heap copy of r: Decide's request is encoded on every
// call, and this keeps the library's cost per decision small.
func appendDecisionRequest(b []byte, r *PeticionDecision) []byte {
	b = append(b, `{"cliente_ref":`...)
	b = jsonappend.String(b, r.ClienteRef)
	b = append(b, `,"contexto":{"canal":`...)
	b = jsonappend.String(b, r.Contexto.Canal)
	if r.Contexto.CampanaID != "" {
		b = append(b, `,"campana_id":`...)
		b = jsonappend.String(b, r.Contexto.CampanaID)
	}
	if r.Contexto.AccionesPermitidas != nil {
		b = append(b, `,"acciones_permitidas":[`...)
		for i, a := range r.Contexto.AccionesPermitidas {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(a), 10)
		}
		b = append(b, ']')
	}
	return append(b, "}}"...)
}
