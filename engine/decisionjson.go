package engine

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends d encoded exactly as encoding/json encodes it (same
// fields, order, number and string forms, no HTML escaping, as the API's one JSON writer). Every
// online answer is encoded once, and encoding/json's reflection took
// about as much CPU as the decision itself. ok is false when d holds
// something encoding/json would reject (a NaN or infinite number, a time
// outside years 0-9999); the caller then uses encoding/json, which reports
// the error.
func (d *Decision) AppendJSON(b []byte) ([]byte, bool) {
	ok := true
	b = append(b, `{"decision_id":`...)
	b = appendJSONString(b, d.DecisionID)
	b = append(b, `,"accion":`...)
	b = strconv.AppendInt(b, int64(d.Accion), 10)
	b = append(b, `,"accion_nombre":`...)
	b = appendJSONString(b, d.AccionNombre)
	b = append(b, `,"propension":`...)
	b = appendJSONFloat(b, d.Propension, &ok)
	b = append(b, `,"politica_version":`...)
	b = appendJSONString(b, d.PoliticaVersion)
	b = append(b, `,"explorado":`...)
	b = strconv.AppendBool(b, d.Explorado)
	b = append(b, `,"en_control":`...)
	b = strconv.AppendBool(b, d.EnControl)
	b = append(b, `,"en_respaldo":`...)
	b = strconv.AppendBool(b, d.EnRespaldo)
	b = append(b, `,"caduca_en":`...)
	b = appendJSONTime(b, d.CaducaEn, &ok)
	b = append(b, `,"motivo":`...)
	b = appendJSONString(b, d.Motivo)
	if d.Detalle != nil {
		b = append(b, `,"detalle":{"acciones":`...)
		if d.Detalle.Acciones == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for i, a := range d.Detalle.Acciones {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"accion":`...)
				b = strconv.AppendInt(b, int64(a.Accion), 10)
				b = append(b, `,"mu_mxn":`...)
				b = appendJSONFloat(b, a.MuMXN, &ok)
				b = append(b, `,"sigma_mxn":`...)
				b = appendJSONFloat(b, a.SigmaMXN, &ok)
				b = append(b, `,"probabilidad":`...)
				b = appendJSONFloat(b, a.Probabilidad, &ok)
				b = append(b, '}')
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	if d.EnSombra != nil {
		b = append(b, `,"en_sombra":`...)
		b = strconv.AppendBool(b, *d.EnSombra)
	}
	return append(b, '}'), ok
}

// appendJSONFloat is encoding/json's float64 form.
func appendJSONFloat(b []byte, f float64, ok *bool) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		*ok = false
		return append(b, '0')
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-09 to e-9, as encoding/json
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendJSONTime is time.Time's MarshalJSON form (RFC 3339 with
// nanoseconds).
func appendJSONTime(b []byte, t time.Time, ok *bool) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		*ok = false
		return append(b, `""`...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const jsonHex = "0123456789abcdef"

// appendJSONString is encoding/json's string form as the API writes it,
// without HTML escaping (Encoder.SetEscapeHTML(false): <, > and & stay as
// they are): control characters escaped, invalid UTF-8 as \ufffd, U+2028
// and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', jsonHex[c>>4], jsonHex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', jsonHex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
