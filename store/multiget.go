package store

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// GetMany reads many keys with one iterator, seeking them in key order:
// after the first seek, a key at or near the iterator's position costs a
// few comparisons instead of a descent of every level, which is what many
// Gets of keys that cluster (the event ids of one request) pay. fn is
// called once for each key present, in key order, with the key's index in
// keys and its value; value is valid only during the call. keys is not
// modified. A non-nil error from fn stops GetMany and is returned.
func (db *DB) GetMany(keys [][]byte, fn func(i int, value []byte) error) error {
	return getMany(db.pdb, keys, fn)
}

// GetMany is DB.GetMany over the snapshot.
func (s *Snapshot) GetMany(keys [][]byte, fn func(i int, value []byte) error) error {
	if s.s == nil {
		return s.db.GetMany(keys, fn)
	}
	return getMany(s.s, keys, fn)
}

func getMany(r iterable, keys [][]byte, fn func(i int, value []byte) error) error {
	if len(keys) == 0 {
		return nil
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	last := keys[order[len(order)-1]]
	upper := append(append(make([]byte, 0, len(last)+1), last...), 0)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: keys[order[0]], UpperBound: upper})
	if err != nil {
		return fmt.Errorf("store: iter: %w", err)
	}
	for n, i := range order {
		if n > 0 && bytes.Equal(keys[i], keys[order[n-1]]) {
			continue // asked twice: reported once
		}
		if !it.SeekGE(keys[i]) {
			break // no key at or after this one: none of the rest is present
		}
		if !bytes.Equal(it.Key(), keys[i]) {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("store: value: %w", namingDamage(err))
		}
		if err := fn(i, v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: iter: %w", namingDamage(err))
	}
	return nil
}

// Span is the key range [Lower, Upper) of one ScanMany scan.
type Span struct{ Lower, Upper []byte }

// ScanMany scans many spans with one iterator, in order of their lower
// keys: the learner's reward windows, one span per decision, which would
// each cost an iterator's construction as Scans. fn is called for every
// key of every span, with the span's index in spans, the key and the
// value; key and value are valid only during the call. A key in two
// spans is reported for each. spans is not modified. A non-nil error from
// fn stops ScanMany and is returned (ErrStop too: it ends the whole call,
// not one span).
func (db *DB) ScanMany(spans []Span, fn func(i int, key, value []byte) error) error {
	if len(spans) == 0 {
		return nil
	}
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(spans[a].Lower, spans[b].Lower) })
	upper := spans[0].Upper
	for _, s := range spans[1:] {
		if bytes.Compare(s.Upper, upper) > 0 {
			upper = s.Upper
		}
	}
	it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: spans[order[0]].Lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("store: iter: %w", err)
	}
	for _, i := range order {
		s := spans[i]
		for ok := it.SeekGE(s.Lower); ok && bytes.Compare(it.Key(), s.Upper) < 0; ok = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				it.Close()
				return fmt.Errorf("store: value: %w", namingDamage(err))
			}
			if err := fn(i, it.Key(), v); err != nil {
				it.Close()
				return err
			}
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: iter: %w", namingDamage(err))
	}
	return nil
}
