package store

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// RefCursor walks a per-customer table (keys: a table prefix, cliente_ref,
// 0x00) in cliente_ref order, moving forward and seeking: the batch
// decider's merge of feature records with customer states. It is not safe
// for concurrent use; Close it when done.
type RefCursor struct {
	it     *pebble.Iterator
	prefix []byte // the table prefix every key starts with
	seek   []byte // reused seek key
	valid  bool
}

func (db *DB) newRefCursor(lower, upper []byte) (*RefCursor, error) {
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("store: iter: %w", err)
	}
	c := &RefCursor{it: it, prefix: lower}
	c.valid = it.First()
	return c, nil
}

// Valid reports whether the cursor is on a record.
func (c *RefCursor) Valid() bool { return c.valid }

// Next moves to the next record and reports whether there is one.
func (c *RefCursor) Next() bool {
	c.valid = c.it.Next()
	return c.valid
}

// Seek moves to the first record whose cliente_ref is ref or after it and
// reports whether there is one.
func (c *RefCursor) Seek(ref []byte) bool {
	c.seek = append(append(append(c.seek[:0], c.prefix...), ref...), 0)
	c.valid = c.it.SeekGE(c.seek)
	return c.valid
}

// SeekExact moves as Seek does and reports whether the cursor is then on
// ref's record itself.
func (c *RefCursor) SeekExact(ref []byte) bool {
	return c.Seek(ref) && bytes.Equal(c.it.Key(), c.seek)
}

// Ref returns the cliente_ref of the current record; valid until the
// cursor moves.
func (c *RefCursor) Ref() []byte {
	k := c.it.Key()[len(c.prefix):]
	return k[:len(k)-1]
}

// Value returns the current record's value; valid until the cursor moves.
func (c *RefCursor) Value() ([]byte, error) {
	v, err := c.it.ValueAndErr()
	return v, namingDamage(err)
}

// Err returns the error the cursor met, if any.
func (c *RefCursor) Err() error { return namingDamage(c.it.Error()) }

// Close releases the cursor.
func (c *RefCursor) Close() error { return namingDamage(c.it.Close()) }
