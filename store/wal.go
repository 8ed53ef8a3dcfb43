package store

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// noReuseFS makes Pebble's WAL recycling write fresh files: a recycled
// write-ahead log would otherwise keep the bytes of its old records (deleted
// customers' data among them) past the end of what is written into it.
type noReuseFS struct{ vfs.FS }

// ReuseForWrite removes the old file and creates the new one empty.
func (fs noReuseFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.FS.Remove(oldname); err != nil {
		return nil, err
	}
	return fs.FS.Create(newname, category)
}

// walRotations is how many WAL rotations PurgeWAL makes: more than the
// logs Pebble keeps for recycling (MemTableStopWritesThreshold + 1, with
// the default threshold 2), so every log written before the call has been
// reused (and so removed by noReuseFS) or deleted.
const walRotations = 5

// PurgeWAL makes sure no write-ahead log written before the call stays on
// disk: it flushes the memtable (so the data lives only in sstables) and
// rotates the WAL past every recyclable log. Deletion calls it after
// compacting what it removed, so tombstones and old records that name a
// deleted customer leave no bytes behind in logs either.
func (db *DB) PurgeWAL() error {
	for i := 0; i < walRotations; i++ {
		b := db.NewBatch()
		b.Set([]byte{spaceGlobal, 'W'}, []byte{byte(i)})
		err := b.Commit()
		b.Close()
		if err != nil {
			return err
		}
		if err := db.pdb.Flush(); err != nil {
			return fmt.Errorf("store: flush: %w", err)
		}
	}
	return nil
}

// PurgeManifest makes sure no MANIFEST written before the call stays on
// disk. A MANIFEST records the first and last key of every sstable, and
// keys can name a customer; Pebble keeps the current MANIFEST and one
// previous one, and (with MaxManifestFileSize tiny) starts a new one when
// the edits since the last one touch more files than the store holds. Each
// round writes one key and flushes (one edit, one file); it stops when every
// MANIFEST of before the call is gone.
func (db *DB) PurgeManifest() error {
	old := map[string]bool{}
	ents, err := db.fs.List(db.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e, "MANIFEST-") {
			old[e] = true
		}
	}
	for i := 0; i < 100000; i++ {
		b := db.NewBatch()
		b.Set([]byte{spaceGlobal, 'W'}, []byte{byte(i)})
		err := b.Commit()
		b.Close()
		if err != nil {
			return err
		}
		if err := db.pdb.Flush(); err != nil {
			return fmt.Errorf("store: flush: %w", err)
		}
		ents, err := db.fs.List(db.dir)
		if err != nil {
			return err
		}
		left := false
		for _, e := range ents {
			left = left || old[e]
		}
		if !left {
			return nil
		}
	}
	return fmt.Errorf("store: old MANIFEST still there")
}
