package store

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	v, err := db.Get(formatKey())
	var found uint64
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return fmt.Errorf("format mark: %w", err)
	case len(v) != 8:
		return fmt.Errorf("format mark: %d bytes, want 8", len(v))
	default:
		found = binary.BigEndian.Uint64(v)
	}
	if found > Format {
		return fmt.Errorf("%w (store format %d; this release reads formats up to %d) and left unchanged: start that newer release again, or go back with this one by restoring the backup taken before the upgrade (coupond admin restore --from DIR)",
			ErrNewerFormat, found, Format)
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
