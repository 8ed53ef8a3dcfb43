package client

import (
	"strconv"
	"unicode/utf8"
)

// appendDecisionRequest appends the JSON of r, byte for byte what
// encoding/json writes for it (FuzzAppendDecisionRequest checks), without
// reflection or a heap copy of r: Decide's request is encoded on every
// call, and this keeps the library's cost per decision small.
func appendDecisionRequest(b []byte, r *PeticionDecision) []byte {
	b = append(b, `{"cliente_ref":`...)
	b = appendJSONString(b, r.ClienteRef)
	b = append(b, `,"contexto":{"canal":`...)
	b = appendJSONString(b, r.Contexto.Canal)
	if r.Contexto.CampanaID != "" {
		b = append(b, `,"campana_id":`...)
		b = appendJSONString(b, r.Contexto.CampanaID)
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

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json does:
// HTML characters and U+2028/U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
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
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
