package schema

// IDPatternText is the API's ID pattern (contract section 7). ValidID checks
// it by hand; a StringSchema given this pattern without a matcher uses
// ValidID rather than a regexp.
const IDPatternText = "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"

// Byte sets as bitmasks over ASCII: bit c of lo for c < 64, bit c-64 of hi
// for 64 <= c < 128.
const (
	alnumLo = 0x3FF << '0'                       // 0-9
	alnumHi = (1<<27 - 1<<1) | (1<<59 - 1<<33)   // A-Z, a-z
	idLo    = alnumLo | 1<<'-' | 1<<'.' | 1<<':' // plus - . :
	idHi    = alnumHi | 1<<('_'-64)              // plus _
	phoneLo = alnumLo | 1<<'-' | 1<<'.'          // 0-9 - .
)

func inSet(c byte, lo, hi uint64) bool {
	switch {
	case c < 64:
		return lo>>c&1 != 0
	case c < 128:
		return hi>>(c-64)&1 != 0
	}
	return false
}

// ValidID reports whether s matches IDPatternText: 1 to 128 characters from
// [A-Za-z0-9_.:-], the first one a letter or digit.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 128 || !inSet(s[0], alnumLo, alnumHi) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !inSet(s[i], idLo, idHi) {
			return false
		}
	}
	return true
}

// LooksLikePhone reports whether s looks like a telephone number (contract
// section 4): nothing but digits and '.' or '-' separators, with 10 to 13
// digits.
func LooksLikePhone(s string) bool {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !inSet(c, phoneLo, 0) {
			return false
		}
		if isDigit(c) {
			n++
		}
	}
	return n >= 10 && n <= 13
}

// phoneMessage is the value_error message for a cliente_ref that looks like
// a telephone number.
const phoneMessage = "cliente_ref parece un número de teléfono; envíe un identificador seudonimizado"

const clienteRefDoc = "Pseudonymized customer id (a salted hash kept by the caller). " +
	"A value that looks like a telephone number (only digits with '.' or '-' separators, 10 to 13 digits) is refused (value_error); " +
	"e-mail addresses fail the pattern."

func notPhone(s string) string {
	if LooksLikePhone(s) {
		return phoneMessage
	}
	return ""
}

// ID is the schema of an identifier: a string of 1 to 128 characters
// matching IDPatternText (string_too_short, string_too_long,
// string_pattern_mismatch).
func ID() *StringSchema {
	return String().Len(1, 128).Pattern(IDPatternText, ValidID)
}

// ClienteRef is the schema of a cliente_ref: an ID of 8 to 128 characters
// that does not look like a telephone number (value_error, see
// LooksLikePhone). E-mail addresses already fail the pattern. For a path
// parameter use ClienteRef().ValidateText(ref, "path", "cliente_ref").
func ClienteRef() *StringSchema {
	return String().Len(8, 128).Pattern(IDPatternText, ValidID).Check(notPhone).Doc(clienteRefDoc)
}
