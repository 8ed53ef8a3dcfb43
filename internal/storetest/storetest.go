// Package storetest opens the stores the tests of the packages above store
// run on: real Pebble over an in-memory file system, with a sandbox tenant
// when they need one. Tests only: nothing in the product imports it. It
// imports store alone, so that engine's own tests can use it too.
package storetest

import (
	"testing"
	"time"

	"github.com/coupond/coupond/store"
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

// Sandbox creates the sandbox tenant id with settings s, created with its
// clock at at.
func Sandbox(tb testing.TB, db *store.DB, id string, at time.Time, s store.Settings) {
	tb.Helper()
	if err := db.CreateTenant(&store.Tenant{ID: id, CreatedAt: at, Sandbox: true, ClockNow: at, Settings: s}); err != nil {
		tb.Fatal(err)
	}
}
