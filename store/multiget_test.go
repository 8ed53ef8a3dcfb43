package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestScanManyMatchesScans checks ScanMany against one Scan per span over
// spans in random order that overlap, repeat, nest and hold nothing, on
// keys both in the memtable and in sstables.
func TestScanManyMatchesScans(t *testing.T) {
	db, _ := openMem(t)
	rng := rand.New(rand.NewPCG(7, 8))
	k := func(i int) []byte { return []byte(fmt.Sprintf("k%04d", i)) }
	put := func(from, to int) {
		b := db.NewBatch()
		for i := from; i < to; i += 1 + rng.IntN(3) {
			b.Set(k(i), []byte(fmt.Sprint(i)))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	put(0, 500)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	put(250, 1000) // memtable over the sstable
	var spans []Span
	for range 200 {
		lo := rng.IntN(1100)
		spans = append(spans, Span{Lower: k(lo), Upper: k(lo + rng.IntN(12))})
	}
	spans = append(spans, spans[3], Span{Lower: k(10), Upper: k(5)}) // repeated; empty
	type hit struct {
		Span     int
		Key, Val string
	}
	var want []hit
	for i, s := range spans {
		if err := db.Scan(s.Lower, s.Upper, func(key, v []byte) error {
			want = append(want, hit{i, string(key), string(v)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]hit, len(spans))
	if err := db.ScanMany(spans, func(i int, key, v []byte) error {
		got[i] = append(got[i], hit{i, string(key), string(v)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var flat []hit
	for _, g := range got {
		flat = append(flat, g...)
	}
	if diff := cmp.Diff(want, flat); diff != "" {
		t.Errorf("ScanMany against Scans (-want +got):\n%s", diff)
	}
	if len(want) < 500 {
		t.Errorf("only %d hits: the spans do not exercise the scan", len(want))
	}
}

// TestSnapshotReads: a Snapshot's Get, GetMany and Scan read the store as
// of the snapshot (a key written, changed or deleted later reads as it
// was), and the DB, a Reader too, reads it as it is.
func TestSnapshotReads(t *testing.T) {
	db, _ := openMem(t)
	set := func(kv ...string) {
		b := db.NewBatch()
		defer b.Close()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				b.Delete([]byte(kv[i]))
			} else {
				b.Set([]byte(kv[i]), []byte(kv[i+1]))
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	set("a", "1", "b", "2", "c", "3")
	snap := db.NewSnapshot()
	defer snap.Close()
	set("a", "", "b", "20", "d", "4")
	read := func(r Reader) []string {
		var out []string
		for _, k := range []string{"a", "b", "d"} {
			v, err := r.Get([]byte(k))
			out = append(out, fmt.Sprintf("get %s=%s %v", k, v, err))
		}
		keys := [][]byte{[]byte("d"), []byte("a"), []byte("b")}
		if err := r.GetMany(keys, func(i int, v []byte) error {
			out = append(out, fmt.Sprintf("many %s=%s", keys[i], v))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := r.Scan([]byte("a"), []byte("z"), func(k, v []byte) error {
			out = append(out, fmt.Sprintf("scan %s=%s", k, v))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := []string{"get a=1 <nil>", "get b=2 <nil>", "get d= store: not found",
		"many a=1", "many b=2", "scan a=1", "scan b=2", "scan c=3"}
	if diff := cmp.Diff(want, read(snap)); diff != "" {
		t.Errorf("snapshot (-want +got):\n%s", diff)
	}
	want = []string{"get a= store: not found", "get b=20 <nil>", "get d=4 <nil>",
		"many b=20", "many d=4", "scan b=20", "scan c=3", "scan d=4"}
	if diff := cmp.Diff(want, read(db)); diff != "" {
		t.Errorf("live store (-want +got):\n%s", diff)
	}
}

// TestAwaitSnapshots: AwaitSnapshots waits for the open snapshots to be
// closed (false when one outlives the wait), and a second Close of one
// does nothing.
func TestAwaitSnapshots(t *testing.T) {
	db, _ := openMem(t)
	a, b := db.NewSnapshot(), db.NewSnapshot()
	await := func(wait time.Duration) bool { return db.AwaitSnapshots(context.Background(), wait) }
	got := []bool{await(20 * time.Millisecond)}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	got = append(got, await(20*time.Millisecond))
	go func() { time.Sleep(20 * time.Millisecond); b.Close() }()
	got = append(got, await(10*time.Second))
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got = append(got, await(time.Millisecond))
	if diff := cmp.Diff([]bool{false, false, true, true}, got); diff != "" {
		t.Errorf("AwaitSnapshots with two, one, one closed meanwhile, none open (-want +got):\n%s", diff)
	}
}

// TestCloseAwaitsSnapshots: Close waits for a reader to close its snapshot
// (an export ending its walk once its connection is closed) instead of
// closing the store under it, which Pebble reports as a leak, the reader's
// next read panicking.
func TestCloseAwaitsSnapshots(t *testing.T) {
	db, err := Open("db", NewMemFS())
	if err != nil {
		t.Fatal(err)
	}
	snap := db.NewSnapshot()
	read := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				read <- fmt.Errorf("panic: %v", p)
			}
		}()
		time.Sleep(50 * time.Millisecond)
		_, err := snap.Get([]byte("k"))
		snap.Close()
		read <- err
	}()
	if err := db.Close(); err != nil {
		t.Errorf("Close with a snapshot closed 50ms later: %v", err)
	}
	if err := <-read; !errors.Is(err, ErrNotFound) {
		t.Errorf("the reader's last read: %v, want ErrNotFound", err)
	}
}
