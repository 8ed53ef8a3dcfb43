package store

import (
	"bytes"
	"encoding/binary"
)

// Model: the tenant's policy models ('m', generation; the engine owns the
// codec). Each model the learner stores takes the next generation, and it
// keeps the one before, the last good model, for when the newest does not
// decode. Generation 0 is the table key alone, with no component: the one
// model key of releases before generations, read as the oldest.

// ModelKey is the key of the tenant's policy model of generation gen: the
// generation as 8 bytes big-endian, so key order is generation order;
// generation 0 is the table key alone (releases before generations).
func ModelKey(tenant string, gen uint64) []byte {
	b := tableKey(tenant, tableModel, 8)
	if gen == 0 {
		return b
	}
	return appendUint(b, gen)
}

// ModelSpan bounds the tenant's model keys, oldest generation first.
func ModelSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableModel) }

// ParseModelKey returns the generation of a model key of tenant; ok is
// false for any key ModelKey does not build.
func ParseModelKey(tenant string, key []byte) (gen uint64, ok bool) {
	prefix := tableKey(tenant, tableModel, 0)
	if !bytes.HasPrefix(key, prefix) {
		return 0, false
	}
	switch rest := key[len(prefix):]; len(rest) {
	case 0:
		return 0, true
	case 8:
		gen = binary.BigEndian.Uint64(rest)
		return gen, gen != 0
	}
	return 0, false
}
