package engine

import (
	"strconv"

	"github.com/coupond/coupond/jsonappend"
)

// AppendJSON appends d encoded exactly as encoding/json encodes it (same
// fields, order, number and string forms, no HTML escaping, as the API's one JSON writer). Every
// online answer is encoded once, and encoding/json's reflection took
// about as much CPU as the decision itself. ok is false when d holds
// something encoding/json would reject (a NaN or infinite number, a time
// outside years 0-9999 or with a zone offset of 24 h or more); the caller then uses encoding/json, which reports
// the error, and b's contents past its original length are unspecified.
func (d *Decision) AppendJSON(b []byte) (_ []byte, ok bool) {
	b = append(b, `{"decision_id":`...)
	b = jsonappend.String(b, d.DecisionID)
	b = append(b, `,"accion":`...)
	b = strconv.AppendInt(b, int64(d.Accion), 10)
	b = append(b, `,"accion_nombre":`...)
	b = jsonappend.String(b, d.AccionNombre)
	b = append(b, `,"propension":`...)
	if b, ok = jsonappend.Float(b, d.Propension); !ok {
		return b, false
	}
	b = append(b, `,"politica_version":`...)
	b = jsonappend.String(b, d.PoliticaVersion)
	b = append(b, `,"explorado":`...)
	b = strconv.AppendBool(b, d.Explorado)
	b = append(b, `,"en_control":`...)
	b = strconv.AppendBool(b, d.EnControl)
	b = append(b, `,"en_respaldo":`...)
	b = strconv.AppendBool(b, d.EnRespaldo)
	b = append(b, `,"caduca_en":`...)
	if b, ok = jsonappend.Time(b, d.CaducaEn); !ok {
		return b, false
	}
	b = append(b, `,"motivo":`...)
	b = jsonappend.String(b, d.Motivo)
	if d.Detalle != nil {
		b = append(b, `,"detalle":`...)
		if b, ok = appendDetalleJSON(b, d.Detalle); !ok {
			return b, false
		}
	}
	if d.EnSombra {
		b = append(b, `,"en_sombra":true`...)
	}
	return append(b, '}'), true
}

// appendDetalleJSON appends dt as encoding/json encodes it; ok is false on
// a NaN or infinite number.
func appendDetalleJSON(b []byte, dt *Detalle) (_ []byte, ok bool) {
	b = append(b, `{"acciones":`...)
	if dt.Acciones == nil {
		return append(b, "null}"...), true
	}
	b = append(b, '[')
	for i, a := range dt.Acciones {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"accion":`...)
		b = strconv.AppendInt(b, int64(a.Accion), 10)
		for _, f := range [...]struct {
			name string
			v    float64
		}{{`,"mu_mxn":`, a.MuMXN}, {`,"sigma_mxn":`, a.SigmaMXN}, {`,"probabilidad":`, a.Probabilidad}} {
			b = append(b, f.name...)
			if b, ok = jsonappend.Float(b, f.v); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), true
}
