package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// RawRecord is one key and value of the raw write baseline.
type RawRecord struct{ Key, Value []byte }

// RawSyncWrites is the baseline of "coupond bench events --baseline":
// Pebble itself, opened on dir with its default options (and the store's
// memtable size), without coupond's layout, cache or group commit. Writer w
// commits the batches of pools[w] in turn, each with Sync and every key
// given a fresh round suffix, until ctx ends, but at least once (a
// measurement with nothing written says nothing). It returns the records
// written and the time spent writing them (from after the open).
func RawSyncWrites(ctx context.Context, dir string, pools [][][]RawRecord) (int64, time.Duration, error) {
	db, err := openRaw(dir)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	start := time.Now()
	var written atomic.Int64
	var wg sync.WaitGroup
	for w := range pools {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for round := 0; round == 0 || ctx.Err() == nil; round++ {
				recs := pools[w][round%len(pools[w])]
				suffix := "\x00" + strconv.Itoa(round)
				b := db.NewBatch()
				for _, r := range recs {
					b.Set(append(r.Key, suffix...), r.Value, nil)
				}
				if err := b.Commit(pebble.Sync); err != nil {
					b.Close()
					return
				}
				b.Close()
				written.Add(int64(len(recs)))
			}
		}(w)
	}
	wg.Wait()
	return written.Load(), time.Since(start), nil
}

// quietRawLogger drops Pebble's informational logging; a fatal error ends
// the (child) process, as the baseline runs in one.
type quietRawLogger struct{}

func (quietRawLogger) Infof(string, ...any)  {}
func (quietRawLogger) Errorf(string, ...any) {}
func (quietRawLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(2)
}

// openRaw opens the raw baselines' Pebble on dir: its default options and
// the store's memtable size, nothing of coupond's layout, cache or group
// commit.
func openRaw(dir string) (*pebble.DB, error) {
	db, err := pebble.Open(dir, &pebble.Options{MemTableSize: 64 << 20, Logger: quietRawLogger{}})
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	return db, nil
}

// RawSyncLog is the store of the floor baseline of "coupond bench
// decisions --baseline": raw Pebble (openRaw),
// where each Put is one batch of one record committed with Sync, so
// concurrent Puts share fsyncs only as Pebble itself groups them.
type RawSyncLog struct{ db *pebble.DB }

// OpenRawSyncLog opens (creating) the Pebble directory dir.
func OpenRawSyncLog(dir string) (*RawSyncLog, error) {
	db, err := openRaw(dir)
	if err != nil {
		return nil, err
	}
	return &RawSyncLog{db: db}, nil
}

// Put commits key and value with Sync before it returns.
func (l *RawSyncLog) Put(key, value []byte) error {
	return l.db.Set(key, value, pebble.Sync)
}

// Close closes the database.
func (l *RawSyncLog) Close() error { return l.db.Close() }
