package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// walHook returns an in-memory file system whose WAL writes and syncs
// (files *.log) first call hook: a test holds or slows the synced writes
// of the store with it.
func walHook(hook func()) storefs.FS {
	fs, faults := storefs.WithWriteFaults(storefs.Mem(), func(path string) error {
		if strings.HasSuffix(path, ".log") {
			hook()
		}
		return nil
	})
	faults.On()
	return fs
}

// openStore opens a store on fs with tenant "acme", closed when the test
// ends.
func openStore(tb testing.TB, fs storefs.FS) *store.DB {
	tb.Helper()
	db, err := store.Open("db", fs)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	if err := db.CreateTenant(&store.Tenant{ID: "acme", CreatedAt: testStart, Settings: store.DefaultSettings()}); err != nil {
		tb.Fatal(err)
	}
	return db
}

// BenchmarkAbuseObserveDuringSweep times observe for a quiet credential
// (quiet-ns/observe, mean, and quiet-max-ns) while the minute's sweep,
// run by another credential's request, takes a step for each of 100
// flagged credentials, each step stored with Sync; flagged=0 is the
// baseline, no sweep running. The store is Pebble in memory ("mem") or
// with each WAL write and sync taking 1 ms as a disk would ("wal1ms").
func BenchmarkAbuseObserveDuringSweep(b *testing.B) {
	for _, fs := range []struct {
		name  string
		delay time.Duration
	}{{"mem", 0}, {"wal1ms", time.Millisecond}} {
		for _, flagged := range []int{0, 100} {
			b.Run(fmt.Sprintf("%s/flagged=%d", fs.name, flagged), func(b *testing.B) {
				benchObserveDuringSweep(b, fs.delay, flagged)
			})
		}
	}
}

func benchObserveDuringSweep(b *testing.B, delay time.Duration, flagged int) {
	g := newAbuseGuard(DefaultAbuseConfig(), openStore(b, walHook(func() { time.Sleep(delay) })), zerolog.Nop(), nil)
	stepping := make(chan struct{}, 1)
	g.onStep = func(string, string) {
		select {
		case stepping <- struct{}{}:
		default:
		}
	}
	at := testStart
	g.observe("acme", "quiet", 200, at)
	for i := range flagged {
		g.observe("acme", fmt.Sprintf("flagged-%03d", i), 200, at)
	}
	var total, worst time.Duration
	b.ResetTimer()
	for range b.N {
		at = at.Add(time.Minute)
		armFlagged(g, at)
		select {
		case <-stepping: // the last sweep's later steps
		default:
		}
		swept := make(chan struct{})
		go func() {
			g.observe("acme", "trigger", 200, at) // the minute's first request: it sweeps
			close(swept)
		}()
		if flagged > 0 {
			<-stepping // the sweep is under way
		} else {
			<-swept
		}
		start := time.Now()
		g.observe("acme", "quiet", 200, at)
		d := time.Since(start)
		total, worst = total+d, max(worst, d)
		<-swept
		if g.level("flagged-000") == levelNormal && flagged > 0 {
			b.Fatal("the sweep took no step")
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "quiet-ns/observe")
	b.ReportMetric(float64(worst.Nanoseconds()), "quiet-max-ns")
}

// armFlagged puts every flagged-* credential of g back at normal with an
// anomaly pending in the minute before at's, so the sweep at at steps each.
func armFlagged(g *abuseGuard, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, u := range g.creds {
		if strings.HasPrefix(id, "flagged-") {
			u.state = AbuseState{ClientID: id}
			u.lastStep, u.pending, u.minute = time.Time{}, "recarga: banco", at.Unix()/60-1
		}
	}
}
