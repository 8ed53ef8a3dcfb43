// Package storetest opens the stores the tests of the packages above store
// run on: real Pebble over an in-memory file system, with a sandbox tenant
// when they need one. Tests only: nothing in the product imports it. It
// imports store (and its storefs) alone, so that engine's own tests can
// use it too.
package storetest

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// Open opens a store over a fresh in-memory file system and closes it when
// tb ends.
func Open(tb testing.TB) *store.DB {
	tb.Helper()
	db, err := store.Open("db", store.NewMemFS())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// OpenBench is Open for a benchmark of synced commits: every new
// write-ahead log comes with 72 MB (more than a 64 MB memtable's log) in
// place, as a disk file whose blocks were allocated ahead
// (storefs.LogsInPlace). On the plain in-memory file system a log grows by
// copying itself, a cost no disk has that rises with the log's length:
// BenchmarkDecide's decisions went from 26 to 45-53 µs as their log grew
// from 7 to 37 MB.
func OpenBench(tb testing.TB) *store.DB {
	tb.Helper()
	db, err := store.Open("db", storefs.LogsInPlace(store.NewMemFS(), 72<<20))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// Sandbox creates the sandbox tenant id with settings s, created with its
// clock at at.
func Sandbox(tb testing.TB, db *store.DB, id string, at time.Time, s store.Settings) {
	tb.Helper()
	if err := db.CreateTenant(&store.Tenant{ID: id, CreatedAt: at, Sandbox: true, ClockNow: at, Settings: s}); err != nil {
		tb.Fatal(err)
	}
}

// FilesHolding lists the files of dir on fs whose raw bytes contain b: what
// a store's directory still holds of an erased value (a file removed since
// the listing is skipped).
func FilesHolding(tb testing.TB, fs storefs.FS, dir string, b []byte) []string {
	tb.Helper()
	names, err := fs.List(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, n := range names {
		f, err := fs.Open(fs.PathJoin(dir, n))
		if err != nil {
			continue // removed since the listing
		}
		raw, err := io.ReadAll(f)
		f.Close()
		if err == nil && bytes.Contains(raw, b) {
			out = append(out, n)
		}
	}
	return out
}
