package store

import "time"

// Console: the operator console's global records under 0x01 'O', by kind:
// sign-in links and sessions ("link"/"session", by SHA-256 of the token)
// and the operator audit log ("audit", tenant, time, sequence). JSON
// written by console.

const (
	consoleLink    = "link"
	consoleSession = "session"
	consoleAudit   = "audit"
)

func consolePrefix(kind string, extra int) []byte {
	b := make([]byte, 0, 2+len(kind)+1+extra)
	return appendStr(append(b, spaceGlobal, globalConsole), kind)
}

// ConsoleLinkKey is the key of the sign-in link whose token hashes to hash.
func ConsoleLinkKey(hash string) []byte {
	return appendStr(consolePrefix(consoleLink, len(hash)+1), hash)
}

// ConsoleSessionKey is the key of the session whose token hashes to hash.
func ConsoleSessionKey(hash string) []byte {
	return appendStr(consolePrefix(consoleSession, len(hash)+1), hash)
}

// ConsoleLinkSpan bounds every sign-in link.
func ConsoleLinkSpan() (lower, upper []byte) {
	lower = consolePrefix(consoleLink, 0)
	return lower, prefixEnd(lower)
}

// ConsoleSessionSpan bounds every session.
func ConsoleSessionSpan() (lower, upper []byte) {
	lower = consolePrefix(consoleSession, 0)
	return lower, prefixEnd(lower)
}

// ConsoleAuditKey is the key of the audit entry number seq of tenant at at.
func ConsoleAuditKey(tenant string, at time.Time, seq uint64) []byte {
	b := appendStr(consolePrefix(consoleAudit, len(tenant)+17), tenant)
	b = appendTime(b, at)
	return appendUint(b, seq)
}

// ConsoleAuditSpan bounds the audit entries of tenant, every tenant's for "".
func ConsoleAuditSpan(tenant string) (lower, upper []byte) {
	lower = consolePrefix(consoleAudit, len(tenant)+1)
	if tenant != "" {
		lower = appendStr(lower, tenant)
	}
	return lower, prefixEnd(lower)
}
