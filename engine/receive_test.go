package engine

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/internal/storetest"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestReleaseHeldPastDamagedBatch: releasing the abuse quarantine goes
// past a held batch that does not decode, or holds an event that does not
// (check fails on it): that batch is moved to the damaged-record
// quarantine whole, every other batch is applied, and nothing is left
// held, so the release neither fails for good nor applies a batch twice.
func TestReleaseHeldPastDamagedBatch(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	byRaw := map[string]Event{}
	hold := func(trace string, ids ...string) {
		t.Helper()
		var evs []IngestEvent
		for _, id := range ids {
			ev := Event{ID: id, ClienteRef: "held-ana-01", TS: t0.Add(-time.Hour), Tipo: CompraCat, Clave: "c",
				ValorCents: 1000, TicketID: "t-" + id, MargenCents: 100}
			raw := fmt.Sprintf(`{"event_id":%q}`, id)
			byRaw[raw] = ev
			evs = append(evs, IngestEvent{Event: ev, Canonical: []byte(raw)})
		}
		res, err := e.Ingester.Receive("acme", evs, Delivery{ClientID: "c1", Trace: trace, At: t0, Now: t0, Hold: true})
		if err != nil || res.Aceptados != len(ids) {
			t.Fatalf("hold: %+v %v", res, err)
		}
	}
	hold("tr-1", "h-1", "h-2")
	hold("tr-2", "h-3")
	hold("tr-3", "h-4", "h-bad")
	hold("tr-4", "h-5")
	damage(t, db, store.QuarantineKey("acme", t0, "tr-2"), `{"eventos":"not a list"}`)
	delete(byRaw, `{"event_id":"h-bad"}`) // check fails on it
	check := func(raw []byte, i int) (IngestEvent, bool, error) {
		ev, ok := byRaw[string(raw)]
		if !ok {
			return IngestEvent{}, false, fmt.Errorf("held event %s does not parse", raw)
		}
		return IngestEvent{Index: i, Event: ev, Canonical: raw}, true, nil
	}
	acc, dup, err := e.Ingester.ReleaseHeld("acme", t0, check)
	if err != nil || acc != 3 || dup != 0 {
		t.Fatalf("release: accepted %d, duplicates %d, %v; want 3 (h-1, h-2, h-5), 0, nil", acc, dup, err)
	}
	if n := e.Ingester.HeldCount("acme"); n != 0 {
		t.Errorf("%d batches still held, want 0", n)
	}
	if diff := cmp.Diff([]string{"event_quarantine", "event_quarantine"}, quarantinedTables(t, e)); diff != "" {
		t.Errorf("damaged-record quarantine (-want +got):\n%s", diff)
	}
	if acc, dup, err := e.Ingester.ReleaseHeld("acme", t0, check); err != nil || acc+dup != 0 {
		t.Errorf("second release: %d %d %v, want nothing", acc, dup, err)
	}
}

// newCrashableEngine is newTestEngine (no catalog) over a file system that
// can be cloned as after a crash: what was synced, nothing else.
func newCrashableEngine(t *testing.T) (*Engine, *storefs.MemFS) {
	t.Helper()
	mem := storefs.CrashableMem()
	db, err := store.Open("db", mem)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := store.DefaultSettings()
	s.ControlShare, s.RateLimits = 0, false
	storetest.Sandbox(t, db, "acme", t0, s)
	return New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clock.NewFake(t0).Now, Seed: 1}), mem
}

// TestHeldDuplicateWaitsForItsOriginal: a held request (abuse quarantine)
// that counts an event as a duplicate of one another request is still
// committing answers only once that one is durable. It answered at once,
// from the pending overlay: a crash before the other commit's sync lost
// the event its client had been told was already processed.
func TestHeldDuplicateWaitsForItsOriginal(t *testing.T) {
	e, mem := newCrashableEngine(t)
	ev := cachePurchase("held-ana-01", 1)
	ts, _ := e.state("acme")
	type answer struct {
		res     IngestResult
		err     error
		crashed *storefs.MemFS // the file system as a crash right after the answer left it
	}
	answered := make(chan answer, 1)
	ts.ingestMu.beforeApply = func() { // the first request is folded, not yet committed
		ts.ingestMu.beforeApply = nil
		go func() {
			res, err := e.Ingester.Receive("acme", []IngestEvent{ev}, Delivery{ClientID: "c2", Trace: "tr-held", At: t0, Now: t0, Hold: true})
			answered <- answer{res, err, mem.CrashClone(storefs.CrashCloneCfg{})}
		}()
		select {
		case a := <-answered:
			answered <- a
		case <-time.After(200 * time.Millisecond): // waiting for this commit, as it should
		}
	}
	ingestAll(t, e, ev)
	a := <-answered
	if a.err != nil || a.res.Duplicados != 1 {
		t.Fatalf("held request: %+v, %v; want one duplicate", a.res, a.err)
	}
	db, err := store.Open("db", a.crashed)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if ok, err := db.Has(store.EventKey("acme", ev.Event.ID)); err != nil || !ok {
		t.Errorf("after a crash right after the held request's answer: event stored %v (%v), want it stored: it was answered as a duplicate", ok, err)
	}
}

// TestHeldResendIsDuplicate: while a client's events are held by the abuse
// quarantine, an event_id it sends again is answered as any resend is: the
// same content counts in duplicados and is not held twice, other content
// is rejected as duplicado (the event held first stands, as the release
// then applies). They were answered as accepted and held again, and the
// release dropped the other content without a word.
func TestHeldResendIsDuplicate(t *testing.T) {
	e, _ := newTestEngine(t, 1, nil)
	event := func(i int, content string) IngestEvent {
		ev := cachePurchase("held-ana-01", 1)
		ev.Index, ev.Canonical = i, []byte(`{"c":"`+content+`"}`)
		return ev
	}
	other := cachePurchase("held-ana-01", 2)
	other.Canonical = []byte(`{"c":"other event"}`)
	dup := rejectDuplicado(&IngestEvent{Event: Event{ID: "held-ana-01-ev1"}})
	dupAt1 := dup
	dupAt1.Indice = 1
	receiveHeld(t, e, t0, []heldReceive{
		{"first", []IngestEvent{event(0, "a")}, IngestResult{Aceptados: 1}, 1},
		{"same again", []IngestEvent{event(0, "a")}, IngestResult{Duplicados: 1}, 1},
		{"other content", []IngestEvent{event(0, "b")}, IngestResult{Rechazados: []Rejection{dup}}, 1},
		{"with a new event", []IngestEvent{other, event(1, "b")}, IngestResult{Aceptados: 1, Rechazados: []Rejection{dupAt1}}, 2},
	})
	byContent := map[string]IngestEvent{`{"c":"a"}`: event(0, "a"), `{"c":"other event"}`: other}
	check := func(raw []byte, i int) (IngestEvent, bool, error) {
		ev, ok := byContent[string(raw)]
		ev.Index = i
		return ev, ok, nil
	}
	if acc, dups, err := e.Ingester.ReleaseHeld("acme", t0, check); err != nil || acc != 2 || dups != 0 {
		t.Fatalf("release: accepted %d, duplicates %d, %v; want 2, 0", acc, dups, err)
	}
	res, err := e.Ingester.Receive("acme", []IngestEvent{event(0, "a")}, Delivery{ClientID: "c1", Trace: "tr-after", At: t0, Now: t0, Hold: true})
	if err != nil || res.Duplicados != 1 {
		t.Errorf("resend after the release: %+v %v, want one duplicate", res, err)
	}
}

// TestIndexHeldOfEarlierRelease: batches an earlier release held in the
// abuse quarantine have no held-event index entries (it wrote the batch
// alone, as HoldBatch without entries does); IndexHeld writes them, once
// (a second run, or one after a crash, writes only what is missing), so
// that a resend of their events is answered as any resend is: the same
// content a duplicate, other content duplicado, neither held again.
// Without it every resend below was accepted and held again.
func TestIndexHeldOfEarlierRelease(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	held := heldChecks{}
	event := func(i int, id, content string) IngestEvent {
		ev := cachePurchase("held-ana-01", 1)
		ev.Event.ID, ev.Index, ev.Canonical = id, i, fmt.Appendf(nil, `{"event_id":%q,"c":%q}`, id, content)
		return held.add(ev)
	}
	for i, ids := range [][]string{{"old-1", "old-2"}, {"old-3"}} {
		h := store.HeldBatch{ClientID: "c1"}
		for _, id := range ids {
			h.Events = append(h.Events, event(0, id, "a").Canonical)
		}
		if err := db.HoldBatch("acme", t0.Add(time.Duration(i)*time.Second), fmt.Sprintf("tr-old-%d", i), &h, nil); err != nil {
			t.Fatal(err)
		}
	}
	index := func(want int) {
		t.Helper()
		if n, d, err := e.Ingester.IndexHeld("acme", held.check); err != nil || n != want || d != 0 {
			t.Errorf("IndexHeld: %d entries written, %d deleted, %v; want %d, 0", n, d, err, want)
		}
	}
	index(3)
	index(0) // idempotent
	dup := rejectDuplicado(&IngestEvent{Event: Event{ID: "old-3"}})
	receiveHeld(t, e, t0.Add(time.Minute), []heldReceive{
		{"same content", []IngestEvent{event(0, "old-2", "a")}, IngestResult{Duplicados: 1}, 2},
		{"other content", []IngestEvent{event(0, "old-3", "b")}, IngestResult{Rechazados: []Rejection{dup}}, 2},
		{"with a new event", []IngestEvent{event(0, "new-1", "a"), event(1, "old-1", "a")}, IngestResult{Aceptados: 1, Duplicados: 1}, 3},
	})
	// A crash between two batches' commits: the entries of the second are
	// missing; the next run writes them alone.
	b := db.NewBatch()
	b.DeleteHeldEvent("acme", "old-3")
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	index(1)
	if acc, dups, err := e.Ingester.ReleaseHeld("acme", t0, held.check); err != nil || acc != 4 || dups != 0 {
		t.Errorf("release: accepted %d, duplicates %d, %v; want 4, 0", acc, dups, err)
	}
	index(0)
}

// TestIndexHeldDeletesStaleEntries: a release without the held-event index
// run on the data dir after one with it (going back) left entries behind:
// taking an erased customer's event out of a held batch it rewrote the
// batch alone, and releasing a batch it deleted the batch alone. IndexHeld
// deletes those entries, so that the erased event_id is new again (it was
// answered as a duplicate, and the event lost) while the events still held
// stay duplicates.
func TestIndexHeldDeletesStaleEntries(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	held := heldChecks{}
	hold := func(trace string, at time.Time, evs ...IngestEvent) {
		t.Helper()
		res, err := e.Ingester.Receive("acme", evs, Delivery{ClientID: "c1", Trace: trace, At: at, Now: t0, Hold: true})
		if err != nil || res.Aceptados != len(evs) {
			t.Fatalf("hold %s: %+v %v", trace, res, err)
		}
	}
	ana, beto, gone := held.purchase("ev-ana", "held-ana-01"), held.purchase("ev-beto", "held-beto-01"), held.purchase("ev-gone", "held-ana-01")
	hold("tr-1", t0, ana, beto)
	hold("tr-2", t0.Add(time.Second), gone)
	// The older release erases held-ana-01: it rewrites tr-1 without her
	// event and deletes tr-2, which held hers alone, both without a word
	// to the index.
	if err := db.HoldBatch("acme", t0, "tr-1", &store.HeldBatch{ClientID: "c1", Events: []json.RawMessage{beto.Canonical}}, nil); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.DeleteHeld(store.QuarantineKey("acme", t0.Add(time.Second), "tr-2"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if n, d, err := e.Ingester.IndexHeld("acme", held.check); err != nil || n != 0 || d != 2 {
		t.Errorf("IndexHeld: %d entries written, %d deleted, %v; want 0, 2", n, d, err)
	}
	for i, tt := range []struct {
		name string
		ev   IngestEvent
		want IngestResult
	}{
		{"erased event, rewritten batch", ana, IngestResult{Aceptados: 1}},
		{"erased event, deleted batch", gone, IngestResult{Aceptados: 1}},
		{"event still held", beto, IngestResult{Duplicados: 1}},
	} {
		d := Delivery{ClientID: "c1", Trace: fmt.Sprintf("tr-again-%d", i), At: t0.Add(time.Minute + time.Duration(i)*time.Second), Now: t0, Hold: true}
		res, err := e.Ingester.Receive("acme", []IngestEvent{tt.ev}, d)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, res); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestIndexHeldErasedThenHeldAgain: a release without the held-event index
// erased a customer (it rewrote the held batch without her event, leaving
// its entry) and then held the client's resend of that event in a batch of
// its own. IndexHeld deletes the stale entry and indexes the new batch's
// event, so a further resend is a duplicate. It tested the entry as live
// (its batch is still held) before deleting it as stale: the new batch's
// event was left without an entry, and the resend was held a third time.
func TestIndexHeldErasedThenHeldAgain(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	held := heldChecks{}
	ana, beto := held.purchase("ev-ana", "held-ana-01"), held.purchase("ev-beto", "held-beto-01")
	res, err := e.Ingester.Receive("acme", []IngestEvent{ana, beto}, Delivery{ClientID: "c1", Trace: "tr-1", At: t0, Now: t0, Hold: true})
	if err != nil || res.Aceptados != 2 {
		t.Fatalf("hold: %+v %v", res, err)
	}
	// The older release erases held-ana-01, then holds the resend of her
	// event, both without a word to the index.
	if err := db.HoldBatch("acme", t0, "tr-1", &store.HeldBatch{ClientID: "c1", Events: []json.RawMessage{beto.Canonical}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.HoldBatch("acme", t0.Add(time.Second), "tr-2", &store.HeldBatch{ClientID: "c1", Events: []json.RawMessage{ana.Canonical}}, nil); err != nil {
		t.Fatal(err)
	}
	if n, d, err := e.Ingester.IndexHeld("acme", held.check); err != nil || n != 1 || d != 1 {
		t.Errorf("IndexHeld: %d entries written, %d deleted, %v; want 1, 1", n, d, err)
	}
	res, err = e.Ingester.Receive("acme", []IngestEvent{ana}, Delivery{ClientID: "c1", Trace: "tr-3", At: t0.Add(time.Minute), Now: t0, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(IngestResult{Duplicados: 1}, res); diff != "" {
		t.Errorf("resend of the event held again (-want +got):\n%s", diff)
	}
	if n := e.Ingester.HeldCount("acme"); n != 2 {
		t.Errorf("%d batches held, want 2", n)
	}
}

// heldChecks are the events a test held, by their held JSON: check
// converts one back as the release's check does (others are dropped).
type heldChecks map[string]IngestEvent

// add records ev and returns it.
func (h heldChecks) add(ev IngestEvent) IngestEvent {
	h[string(ev.Canonical)] = ev
	return ev
}

// purchase is a purchase of ref with event_id id, recorded.
func (h heldChecks) purchase(id, ref string) IngestEvent {
	ev := cachePurchase(ref, 1)
	ev.Event.ID, ev.Canonical = id, fmt.Appendf(nil, `{"event_id":%q,"cliente_ref":%q}`, id, ref)
	return h.add(ev)
}

func (h heldChecks) check(raw []byte, i int) (IngestEvent, bool, error) {
	ev, ok := h[string(raw)]
	ev.Index = i
	return ev, ok, nil
}

// heldReceive is one request of receiveHeld: its events, the answer it
// wants and the batches held after it.
type heldReceive struct {
	name     string
	events   []IngestEvent
	want     IngestResult
	wantHeld int
}

// receiveHeld sends each request of reqs to acme's abuse quarantine (a
// second apart from start) and checks its answer and the batches held.
func receiveHeld(t *testing.T, e *Engine, start time.Time, reqs []heldReceive) {
	t.Helper()
	for i, tt := range reqs {
		d := Delivery{ClientID: "c1", Trace: fmt.Sprintf("tr-%d", i), At: start.Add(time.Duration(i) * time.Second), Now: t0, Hold: true}
		res, err := e.Ingester.Receive("acme", tt.events, d)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, res); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
		if n := e.Ingester.HeldCount("acme"); n != tt.wantHeld {
			t.Errorf("%s: %d batches held, want %d", tt.name, n, tt.wantHeld)
		}
	}
}
