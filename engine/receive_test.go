package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
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
