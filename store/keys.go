package store

// The key builder and decoder every table file uses. Nothing here is
// exported: the tables' typed functions are the only way to make a key (see
// doc.go for the layout).

import (
	"encoding/binary"
	"math"
	"time"
)

const (
	spaceGlobal byte = 0x01
	spaceTenant byte = 0x02

	globalTenant     byte = 'T'
	globalCredential byte = 'C'
	globalConsole    byte = 'O'
	globalPurgeOwed  byte = 'P'
	globalLogDamage  byte = 'L' // damaged-log notes (logcheck.go)
	globalFormat     byte = 'F' // the store's format mark (format.go)
	globalKeysMark   byte = 'K' // fingerprint of keys.json (secrets.go)
	globalKeysNext   byte = 'N' // fingerprint of the keys a rotation is writing (secrets.go)
	globalPurgeRound byte = 'W' // PurgeWAL's and PurgeManifest's round key (wal.go)
	globalTenantDel  byte = 'R' // a deleted tenant's tombstone (tenantdel.go)
)

// Table bytes inside a tenant's key space (doc.go; registered in tables.go).
const (
	tableEvent          byte = 'e'
	tableCustomerEvent  byte = 'E'
	tableFeatures       byte = 'f'
	tableDecision       byte = 'd'
	tableCustomerDecide byte = 'D'
	tableAttribution    byte = 'a'
	tableIdempotency    byte = 'i'
	tableCatalog        byte = 'k'
	tableCampaign       byte = 'p'
	tableBudget         byte = 'b'
	tableModel          byte = 'm'
	tableRewardQueue    byte = 'r'
	tableJob            byte = 'j'
	tableJobClients     byte = 'J'
	tableWebhook        byte = 'w'
	tableWebhookQueue   byte = 'W'
	tableDaily          byte = 'q'
	tableDeletion       byte = 'x'
	tableDeletionQueue  byte = 'X'
	tableAccessLog      byte = 'l'
	tableQuality        byte = 'Q'
	tableAbuse          byte = 'A'
	tableQuarantine     byte = 'z'
	tableHeldEvent      byte = 'h'
	tableMeta           byte = 'M'
	tableDamaged        byte = 'U'
)

// tenantPrefix is the prefix of every key holding data of tenant.
func tenantPrefix(tenant string) []byte {
	b := make([]byte, 0, len(tenant)+2)
	b = append(b, spaceTenant)
	return appendStr(b, tenant)
}

// TenantSpan bounds every key holding data of tenant: deleting a tenant or
// reading all of its data is this one range.
func TenantSpan(tenant string) (lower, upper []byte) {
	lower = tenantPrefix(tenant)
	return lower, prefixEnd(lower)
}

// tableKey starts a tenant data key: the tenant prefix and the table byte,
// with room for extra more bytes.
func tableKey(tenant string, table byte, extra int) []byte {
	b := make([]byte, 0, len(tenant)+3+extra)
	b = append(b, spaceTenant)
	b = appendStr(b, tenant)
	return append(b, table)
}

// key builds a tenant data key: the tenant prefix, the table byte and the
// given components. Strings are 0x00-terminated; int64, int and time.Time
// (its UnixNano) are 8 bytes big-endian with the sign bit flipped; uint64
// is 8 bytes big-endian; []byte is appended raw (use it last). The typed
// functions of the table files use the appenders below directly; key is
// the general form they must agree with (keys_test.go).
func key(tenant string, table byte, parts ...any) []byte {
	b := tableKey(tenant, table, 48)
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			b = appendStr(b, v)
		case int64:
			b = appendInt(b, v)
		case uint64:
			b = appendUint(b, v)
		case int:
			b = appendInt(b, int64(v))
		case time.Time:
			b = appendTime(b, v)
		case []byte:
			b = append(b, v...)
		default:
			panic("store: unsupported key part type")
		}
	}
	return b
}

// tableSpan returns the bounds [lower, upper) of a tenant table, optionally
// narrowed to the keys that start with the given components.
func tableSpan(tenant string, table byte, parts ...any) (lower, upper []byte) {
	lower = key(tenant, table, parts...)
	return lower, prefixEnd(lower)
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
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

func appendInt(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(v)^(1<<63))
}

func appendUint(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

func appendTime(b []byte, t time.Time) []byte { return appendInt(b, t.UnixNano()) }

// LastKeyTime is the latest instant a key holds in order: a key writes a
// time as its UnixNano, which leaves int64 after it (2262-04-11) and wraps
// to 1677, so an event, a reward queue entry or any other keyed time past
// it sorts before earlier ones.
func LastKeyTime() time.Time { return time.Unix(0, math.MaxInt64).UTC() }

// splitKey returns the components after the table byte of a tenant data key,
// as raw bytes: strings are cut at their 0x00 terminator, fixed-size integers
// are taken as 8 bytes. layout lists 's' for a string and '8' for an 8-byte
// integer. It returns ok false when the key does not fit the layout.
func splitKey(tenant string, key []byte, layout string) (parts [][]byte, ok bool) {
	n := 1 + len(tenant) + 1 + 1
	if len(key) < n {
		return nil, false
	}
	rest := key[n:]
	parts = make([][]byte, 0, len(layout))
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

// keyString returns part i of key split by splitKey with layout, as a
// string; ok is false when key is not of tenant or not of that layout.
func keyString(tenant string, key []byte, layout string, i int) (string, bool) {
	parts, ok := splitKey(tenant, key, layout)
	if !ok {
		return "", false
	}
	return string(parts[i]), true
}

// int64At decodes a signed integer key component.
func int64At(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

// timeAt decodes a time key component.
func timeAt(b []byte) time.Time { return time.Unix(0, int64At(b)).UTC() }

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
