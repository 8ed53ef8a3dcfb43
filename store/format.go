package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Format is the store format this release writes, kept in the store's
// format mark (0x01 'F', 8 bytes big-endian). Raise it with any change to
// what is stored that a release before it would misread: a record of a
// new codec version (an older release reads it as damaged and moves it to
// quarantine), a new table whose entries an older release leaves stale.
// Format 1 is every record of the releases up to 2026-12-06 (the decision
// record of the sending cost, the held-event index, the customer state
// that keeps its open decision's politica_version); releases before the
// mark existed do not read it. Format 2 (2026-12-06, later): a decision
// record may carry its candidates' model keys (engine's flagArms, written
// once a catalog gave an id to another coupon), which format 1 reads as
// damaged.
const Format = 2

// ErrNewerFormat is the error of opening a store a newer release wrote.
var ErrNewerFormat = errors.New("store written by a newer coupond")

// formatKey is the key of the store's format mark.
func formatKey() []byte { return []byte{spaceGlobal, globalFormat} }

// settleFormat refuses a store whose format mark is newer than Format: a
// newer release wrote it, and this one would misread its records (reading
// them as damaged, it would move them to quarantine). A store of an older
// format, or without a mark, is marked Format, before anything of this
// release is written, so that an older release that reads the mark
// refuses it in turn.
func (db *DB) settleFormat() error {
	found, err := formatMark(db.pdb)
	if err != nil {
		return err
	}
	if found > Format {
		return newerFormatError(found)
	}
	if found == Format {
		return nil
	}
	b := db.NewBatch()
	defer b.Close()
	b.Set(formatKey(), binary.BigEndian.AppendUint64(nil, Format))
	if err := b.Commit(); err != nil {
		return fmt.Errorf("format mark: %w", err)
	}
	return nil
}

// refuseNewerFormat refuses the store in dir when a newer release marked
// it, as settleFormat does, having read the mark with Pebble opened
// read-only (opts otherwise), which replays the store's logs in memory and
// writes nothing: Pebble opened for writing first flushes them into a new
// table and writes a new MANIFEST, OPTIONS file and log, so a store
// refused after that was no longer as the newer release left it. A store
// that does not exist yet, or that the read-only open cannot read, is left
// to the open that follows, which creates it or reports why not.
func refuseNewerFormat(dir string, opts *pebble.Options) error {
	ro := opts.Clone()
	ro.ReadOnly = true
	pdb, err := pebble.Open(dir, ro)
	if err != nil {
		return nil
	}
	defer pdb.Close()
	if found, err := formatMark(pdb); err == nil && found > Format {
		return newerFormatError(found)
	}
	return nil
}

// formatMark is the format the store's mark names, 0 without a mark.
func formatMark(r pebble.Reader) (uint64, error) {
	v, err := get(r, formatKey())
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("format mark: %w", err)
	case len(v) != 8:
		return 0, fmt.Errorf("format mark: %d bytes, want 8", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// newerFormatError is the refusal of a store of format found, newer than
// Format.
func newerFormatError(found uint64) error {
	return fmt.Errorf("%w (store format %d; this release reads formats up to %d) and left unchanged: start that newer release again, or go back with this one by restoring the backup taken before the upgrade (coupond admin restore --from DIR)",
		ErrNewerFormat, found, Format)
}
