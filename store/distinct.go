package store

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// DistinctFirst calls fn once per distinct first key part (the bytes up to
// the first 0x00) of the keys in [lo, hi), after lo: one seek per distinct
// value, not one step per key. It serves "every customer that leads keys of
// this table" scans.
func (db *DB) DistinctFirst(lo, hi []byte, fn func(part []byte)) error {
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: iter: %w", err)
	}
	for valid := it.First(); valid; {
		rest := it.Key()[len(lo):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			valid = it.Next()
			continue
		}
		fn(rest[:i])
		next := append(append([]byte(nil), lo...), rest[:i+1]...)
		valid = it.SeekGE(prefixEnd(next))
	}
	return namingDamage(it.Close())
}
