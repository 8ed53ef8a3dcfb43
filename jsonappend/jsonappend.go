// Package jsonappend appends JSON values to a byte slice, byte for byte as
// encoding/json's Encoder writes them with SetEscapeHTML(false) and without
// its trailing newline: the API's one JSON form ("<", ">" and "&" stay as
// they are, so a URL keeps its "&").
//
// The hot encoders (a decision answer, a batch result line, the client's
// request) write their fields by hand with these primitives instead of
// paying encoding/json's reflection; everything else uses Marshal. The
// package imports only the standard library, so the client library may use
// it too.
package jsonappend

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Marshal is json.Marshal without HTML escaping: what an Encoder with
// SetEscapeHTML(false) writes for v, without the trailing newline. Its
// errors are encoding/json's.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

const hexDigits = "0123456789abcdef"

// String appends s as a JSON string: '"' and '\' escaped, control
// characters as \b \f \n \r \t or \u00XX, U+2028 and U+2029 as \u2028 and
// \u2029, each byte of invalid UTF-8 as \ufffd; "<", ">" and "&" unescaped.
func String(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendASCIIEscape(dst, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendASCIIEscape appends the escape of c, a control character, '"' or
// '\'.
func appendASCIIEscape(dst []byte, c byte) []byte {
	switch c {
	case '\\', '"':
		return append(dst, '\\', c)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}

// Float appends f as a JSON number (encoding/json's float64 form: the
// shortest decimal that reads back as f, with an exponent below 1e-6 and
// from 1e21 on). ok is false, and dst comes back unchanged, when f is NaN or
// infinite: encoding/json rejects those.
func Float(dst []byte, f float64) (_ []byte, ok bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' { // e-09 to e-9, as encoding/json
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// Time appends t as a JSON string in RFC 3339 with nanoseconds (trailing
// zeros dropped), as time.Time's MarshalJSON. ok is false, and dst comes
// back unchanged, when MarshalJSON would fail: a year outside 0-9999 or a
// zone offset of 24 hours or more.
func Time(dst []byte, t time.Time) (_ []byte, ok bool) {
	n0 := len(dst)
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	if y := t.Year(); y < 0 || y > 9999 {
		return dst[:n0], false
	}
	if dst[len(dst)-1] != 'Z' {
		// The offset ends the text: "+hh:mm". More hour digits put a digit
		// where the sign stands.
		c := dst[len(dst)-len("Z07:00")]
		h := 10*(dst[len(dst)-5]-'0') + dst[len(dst)-4] - '0'
		if '0' <= c && c <= '9' || h >= 24 {
			return dst[:n0], false
		}
	}
	return append(dst, '"'), true
}
