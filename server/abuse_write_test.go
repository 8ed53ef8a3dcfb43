package server

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestAbuseWriteDoesNotBlockOtherCredentials: while a step's synced write
// is in progress (held here at the WAL), another credential's requests
// (observe, and level, which authentication asks on every request) go on,
// and the stepped credential's new level already applies. The write used
// to be made under the guard's lock, so every request of every tenant
// waited for each fsync of a step (and for all of a minute's sweep).
func TestAbuseWriteDoesNotBlockOtherCredentials(t *testing.T) {
	var hold atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	g := newAbuseGuard(DefaultAbuseConfig(), openStore(t, walHook(func() {
		if hold.Load() {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
	})), zerolog.Nop(), nil)
	g.observe("acme", "quiet", 200, testStart)
	hold.Store(true)
	stepped := make(chan struct{})
	go func() {
		g.signal("acme", "flagged", "recarga: prueba", testStart)
		close(stepped)
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the step's write never reached the WAL")
	}
	other := make(chan string, 1)
	go func() {
		g.observe("acme", "quiet", 200, testStart.Add(time.Second))
		other <- levelNames[g.level("quiet")] + " " + levelNames[g.level("flagged")]
	}()
	var got string
	select {
	case got = <-other:
	case <-time.After(5 * time.Second):
		got = "blocked behind the write"
	}
	hold.Store(false)
	close(release)
	<-stepped
	if diff := cmp.Diff("normal aviso", got); diff != "" {
		t.Errorf("levels of quiet and flagged while flagged's step is being written (-want +got):\n%s", diff)
	}
	g2 := newAbuseGuard(DefaultAbuseConfig(), g.db, zerolog.Nop(), nil)
	if diff := cmp.Diff(g.creds["flagged"].state, g2.creds["flagged"].state); diff != "" {
		t.Errorf("stored state once the write is done (-memory +stored):\n%s", diff)
	}
}

// TestAbuseStepsAndClearsRaceStoreTheLast: steps (each stored with Sync)
// and the operator's clears of one credential racing each other end with
// the store holding the state the guard holds in memory (the last change,
// never an earlier one written over it) and the credential's Suspended
// flag matching its level; ClearAbuse returns after its change is stored.
func TestAbuseStepsAndClearsRaceStoreTheLast(t *testing.T) {
	var n atomic.Int64
	h := newHarnessOn(t, walHook(func() {
		if n.Add(1)%3 == 0 {
			time.Sleep(50 * time.Microsecond) // widens the windows between writers
		}
	}))
	h.tenant("acme", false, nil)
	id, _ := h.credential("acme", "eventos:publicar")
	g, step := h.srv.abuse, DefaultAbuseConfig().StepInterval
	type stored struct {
		State     AbuseState
		Suspended bool
	}
	for round := range 10 {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 30 {
				g.signal("acme", id, "recarga: prueba", testStart.Add(time.Duration(round*30+i)*step))
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 10 {
				st, err := h.srv.ClearAbuse(id, testStart.Add(time.Duration(round*30+i)*step))
				if err != nil && !errors.Is(err, ErrNoAbuseState) {
					t.Errorf("ClearAbuse: %v", err)
				}
				if err == nil {
					// The stored steps hold the clearance (they may hold later
					// steps too, and keep only the latest maxSteps).
					stored := newAbuseGuard(DefaultAbuseConfig(), h.db, zerolog.Nop(), nil).creds[id].state.Steps
					clearance := st.Steps[len(st.Steps)-1]
					if !slices.ContainsFunc(stored, func(s AbuseStep) bool { return cmp.Equal(s, clearance) }) {
						t.Errorf("ClearAbuse returned before its clearance was stored")
					}
				}
			}
		}()
		wg.Wait()
		c, _ := h.db.Credential(id)
		g2 := newAbuseGuard(DefaultAbuseConfig(), h.db, zerolog.Nop(), nil)
		mem := stored{g.creds[id].state, g.creds[id].state.Level == levelSuspension}
		if diff := cmp.Diff(mem, stored{g2.creds[id].state, c.Suspended}); diff != "" {
			t.Fatalf("round %d: stored state (-memory +stored):\n%s", round, diff)
		}
	}
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
