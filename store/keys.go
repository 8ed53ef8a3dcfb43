package store

// Key layout. This file is the only place that knows how keys are built.
// The format is persistent: changing any byte here needs a migration.
//
// Every component that is a string is an identifier that matches the API's
// ID pattern (or the tenant pattern), so it never contains 0x00; components
// are written as the string followed by a 0x00 terminator, which keeps byte
// order equal to string order for the prefix scans below. Integers are
// big-endian so that byte order is numeric order.
//
//	0x01 'T' tenant 0x00                      tenant record
//	0x01 'C' client_id 0x00                   credential record
//	0x01 'O' kind 0x00 ...                    operator console: sign-in links and
//	                                          sessions (by SHA-256 of the token),
//	                                          the operator audit log (ConsoleKey)
//	0x02 tenant 0x00 <table> ...              tenant data, see the tables below
//
// Deleting a tenant or reading all of its data is a bounded range over
// TenantPrefix(tenant).

import (
	"encoding/binary"
	"time"
)

const (
	spaceGlobal byte = 0x01
	spaceTenant byte = 0x02

	globalTenant     byte = 'T'
	globalCredential byte = 'C'
	globalConsole    byte = 'O'
)

// Table bytes inside a tenant's key space.
const (
	TableEvent          byte = 'e' // event_id → encoded event
	TableCustomerEvent  byte = 'E' // cliente_ref, ts, event_id → small event summary
	TableFeatures       byte = 'f' // cliente_ref → encoded features
	TableDecision       byte = 'd' // decision nonce → decision record
	TableCustomerDecide byte = 'D' // cliente_ref, ts, nonce → empty
	TableAttribution    byte = 'a' // cupon_emitido_id → attribution record
	TableIdempotency    byte = 'i' // cliente_ref?, key → idempotency record
	TableCatalog        byte = 'k' // single key → catalog
	TableCampaign       byte = 'p' // campana_id → campaign
	TableBudget         byte = 'b' // campana_id → budget counters
	TableModel          byte = 'm' // single key → policy model
	TableRewardQueue    byte = 'r' // close time, nonce → empty
	TableJob            byte = 'j' // job_id → job record
	TableJobClients     byte = 'J' // job_id, index → stored batch request chunk
	TableWebhook        byte = 'w' // single key → webhook registration
	TableWebhookQueue   byte = 'W' // due time, delivery id → delivery
	TableDaily          byte = 'q' // day, counter name [, cliente_ref] → counter
	TableDeletion       byte = 'x' // keyed hash of cliente_ref → deletion record
	TableDeletionQueue  byte = 'X' // sequence → pending deletion
	TableAccessLog      byte = 'l' // time, sequence → access-log entry
	TableQuality        byte = 'Q' // single key → data-quality counters
	TableAbuse          byte = 'A' // client_id → abuse state
	TableQuarantine     byte = 'z' // time, event_id → quarantined event batch
	TableMeta           byte = 'M' // name → tenant-level counters and settings
	TableDamaged        byte = 'U' // original key (from its table byte on) → damaged record moved aside
)

// DamagedKey is the key under which a damaged record of tenant stored at key
// is kept in quarantine: the tenant prefix, TableDamaged, then key from its
// table byte on. A record's quarantine key is derived from its own key, so
// whoever deletes the record by its key (a customer's deletion) can delete
// its quarantined copy too. It returns nil when key is not a data key of
// tenant.
func DamagedKey(tenant string, key []byte) []byte {
	p := TenantPrefix(tenant)
	if len(key) <= len(p) || string(key[:len(p)]) != string(p) || key[len(p)] == TableDamaged {
		return nil
	}
	out := make([]byte, 0, len(key)+1)
	out = append(out, p...)
	out = append(out, TableDamaged)
	return append(out, key[len(p):]...)
}

// DamagedOriginal is the inverse of DamagedKey: the key a quarantined record
// was stored at, or nil when qkey is not a quarantine key of tenant.
func DamagedOriginal(tenant string, qkey []byte) []byte {
	p := TenantPrefix(tenant)
	if len(qkey) <= len(p)+1 || string(qkey[:len(p)]) != string(p) || qkey[len(p)] != TableDamaged {
		return nil
	}
	out := make([]byte, 0, len(qkey)-1)
	out = append(out, p...)
	return append(out, qkey[len(p)+1:]...)
}

// TenantKey is the key of a tenant record.
func TenantKey(tenant string) []byte {
	return appendStr([]byte{spaceGlobal, globalTenant}, tenant)
}

// TenantRecordsPrefix bounds the scan over all tenant records.
func TenantRecordsPrefix() []byte { return []byte{spaceGlobal, globalTenant} }

// CredentialKey is the key of a credential record.
func CredentialKey(clientID string) []byte {
	return appendStr([]byte{spaceGlobal, globalCredential}, clientID)
}

// CredentialRecordsPrefix bounds the scan over all credential records.
func CredentialRecordsPrefix() []byte { return []byte{spaceGlobal, globalCredential} }

// ConsoleKey is a key of the operator console's global records: kind
// ("link", "session", "audit") and components encoded as in Key.
func ConsoleKey(kind string, parts ...any) []byte {
	k := Key("", 0, parts...)[3:] // the components, encoded as Key encodes them
	b := appendStr([]byte{spaceGlobal, globalConsole}, kind)
	return append(b, k...)
}

// TenantPrefix is the prefix of every key holding data of tenant.
func TenantPrefix(tenant string) []byte {
	b := make([]byte, 0, len(tenant)+2)
	b = append(b, spaceTenant)
	return appendStr(b, tenant)
}

// Key builds a tenant data key: the tenant prefix, the table byte and the
// given components. Strings are 0x00-terminated; int64 and uint64 are
// 8 bytes big-endian (int64 with the sign bit flipped); time.Time is its
// UnixNano as int64; []byte is appended raw (use it last).
func Key(tenant string, table byte, parts ...any) []byte {
	b := make([]byte, 0, 64)
	b = append(b, spaceTenant)
	b = appendStr(b, tenant)
	b = append(b, table)
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			b = appendStr(b, v)
		case int64:
			b = binary.BigEndian.AppendUint64(b, uint64(v)^(1<<63))
		case uint64:
			b = binary.BigEndian.AppendUint64(b, v)
		case int:
			b = binary.BigEndian.AppendUint64(b, uint64(int64(v))^(1<<63))
		case time.Time:
			b = binary.BigEndian.AppendUint64(b, uint64(v.UnixNano())^(1<<63))
		case []byte:
			b = append(b, v...)
		default:
			panic("store.Key: unsupported key part type")
		}
	}
	return b
}

// TableSpan returns the bounds [lower, upper) of a tenant table, optionally
// narrowed to the keys that start with the given components.
func TableSpan(tenant string, table byte, parts ...any) (lower, upper []byte) {
	lower = Key(tenant, table, parts...)
	return lower, PrefixEnd(lower)
}

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

func appendStr(b []byte, s string) []byte {
	b = append(b, s...)
	return append(b, 0)
}

// SplitKey returns the components after the table byte of a tenant data key,
// as raw bytes: strings are cut at their 0x00 terminator, fixed-size integers
// are taken as 8 bytes. layout lists 's' for a string and '8' for an 8-byte
// integer. It returns ok false when the key does not fit the layout.
func SplitKey(tenant string, key []byte, layout string) (parts [][]byte, ok bool) {
	n := 1 + len(tenant) + 1 + 1
	if len(key) < n {
		return nil, false
	}
	rest := key[n:]
	for _, c := range layout {
		switch c {
		case 's':
			i := indexZero(rest)
			if i < 0 {
				return nil, false
			}
			parts = append(parts, rest[:i])
			rest = rest[i+1:]
		case '8':
			if len(rest) < 8 {
				return nil, false
			}
			parts = append(parts, rest[:8])
			rest = rest[8:]
		default:
			return nil, false
		}
	}
	return parts, true
}

// Int64At decodes an int64 key component written by Key.
func Int64At(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

// TimeAt decodes a time.Time key component written by Key.
func TimeAt(b []byte) time.Time { return time.Unix(0, Int64At(b)).UTC() }

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
