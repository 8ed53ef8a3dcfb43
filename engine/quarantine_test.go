package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// plantBroken writes, by hand, records of ana in the shapes older releases
// stored (issue 17): her decision confirmed with a ts_ejecucion of year 0,
// and a CUPON_RECIBIDO event whose caducidad is in year 10000. Both are
// encoded as the old code did and neither decodes. It returns the decision.
func plantBroken(t *testing.T, e *Engine, db *store.DB, ana string) *DecisionRecord {
	t.Helper()
	d, err := e.Decide("acme", Request{ClienteRef: ana, Canal: "push"})
	if err != nil {
		t.Fatal(err)
	}
	nonce, _ := e.ids.parse("acme", d.DecisionID)
	r, err := e.loadDecision("acme", nonce)
	if err != nil {
		t.Fatal(err)
	}
	year0 := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Estado, r.TsEjecucion, r.ConfirmadaEn = EstadoEjecutada, &year0, &t0
	ev := Event{ID: "cup-ev-1", ClienteRef: ana, TS: t0.Add(-time.Hour), Tipo: CuponRecibido, Clave: "T1",
		CuponEmitidoID: "cup-ana-1", Caducidad: t0.Add(240 * time.Hour)}
	if res, err := e.Ingester.Ingest("acme", []IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	v, err := db.Get(store.EventKey("acme", ev.ID))
	if err != nil {
		t.Fatal(err)
	}
	ev.Caducidad = time.Date(10000, 1, 1, 13, 0, 0, 0, time.UTC)
	b := db.NewBatch()
	defer b.Close()
	b.Set(decisionKey("acme", nonce), marshalRecord(r))
	b.Set(store.EventKey("acme", ev.ID), ev.AppendEncode(append([]byte(nil), v[:32]...)))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	return r
}

// ingestFor ingests n purchases of ref (ids prefix-0..n-1) before t0.
func ingestFor(tb testing.TB, e *Engine, ref, prefix string, n int) {
	tb.Helper()
	evs := make([]IngestEvent, n)
	for i := range evs {
		ev := Event{ID: fmt.Sprintf("%s-%d", prefix, i), ClienteRef: ref, TS: t0.Add(-time.Duration(n-i) * time.Hour),
			Tipo: CompraCat, Clave: "abarrotes", ValorCents: 10000, TicketID: fmt.Sprintf("t%s%d", prefix, i), MargenCents: 2500}
		evs[i] = IngestEvent{Index: i, Event: ev, Canonical: []byte(ev.ID)}
	}
	res, err := e.Ingester.Ingest("acme", evs)
	if err != nil || res.Aceptados != n {
		tb.Fatalf("ingest: %+v %v", res, err)
	}
}

// TestCheckRepairThenReadersComplete: admin check's engine side reports the
// two broken records, repair moves them to quarantine, and then the
// tenant's learner, evaluation, the customer's export and deletion all
// complete; the deletion erases the quarantined copies too.
func TestCheckRepairThenReadersComplete(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	const ana, beto = "ana-00000001", "beto-0000002"
	ingestFor(t, e, ana, "a", 3)
	ingestFor(t, e, beto, "b", 3)
	plantBroken(t, e, db, ana)
	if _, err := e.Decide("acme", Request{ClienteRef: beto, Canal: "push"}); err != nil {
		t.Fatal(err)
	}

	st, err := e.Quarantine.Check(context.Background(), "acme", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Damaged) != 2 || st.Repaired != 0 || len(st.Quarantined) != 0 {
		t.Fatalf("check: %+v", st)
	}
	tables := map[string]bool{}
	for _, d := range st.Damaged {
		tables[d.Table] = true
	}
	if !tables["decision"] || !tables["event"] {
		t.Errorf("check found %+v, want a decision and an event", st.Damaged)
	}
	if st, err = e.Quarantine.Check(context.Background(), "", true); err != nil || st.Repaired != 2 {
		t.Fatalf("check --repair: %+v %v", st, err)
	}
	if st, err = e.Quarantine.Check(context.Background(), "acme", false); err != nil || len(st.Damaged) != 0 || len(st.Quarantined) != 2 {
		t.Fatalf("check after repair: %+v %v", st, err)
	}
	if n, err := e.Quarantine.QuarantinedRecords(); err != nil || n != 2 {
		t.Fatalf("QuarantinedRecords = %d, %v; want 2", n, err)
	}

	advance(t, db, 40*24*time.Hour)
	ls, err := e.Learner.Learn("acme")
	if err != nil || ls.Unconfirmed != 1 {
		t.Fatalf("learner after repair: %+v %v (want beto's decision closed)", ls, err)
	}
	if _, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Replicates: 10}); err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	if _, err := e.Evaluator.Shadow(context.Background(), "acme"); err != nil {
		t.Fatalf("shadow: %v", err)
	}
	// The customer's export and deletion over these records: package
	// privacy (TestExportAndDeletionAfterRepair).
}

// TestCheckRepairKeepsRecordsRewritten: admin check --repair scans a
// snapshot, then moves what it found damaged. A record rewritten since,
// good (a campaign or the catalog put again, after a reader quarantined
// the damaged one), is left as it is: the repair deleted the acknowledged
// PUT, which an engine started again then no longer had.
func TestCheckRepairKeepsRecordsRewritten(t *testing.T) {
	for _, tc := range []struct {
		name    string
		key     []byte
		rewrite func(t *testing.T, e *Engine)
		check   func(t *testing.T, e *Engine)
	}{
		{"campaign", store.CampaignKey("acme", "c1"),
			func(t *testing.T, e *Engine) { // PutCampaign reads the old one: quarantined
				if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "again"}, t0); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, e *Engine) {
				c, err := e.Campaigns.Campaign("acme", "c1")
				if err != nil || c.Descripcion != "again" {
					t.Errorf("campaign after check --repair and a restart: %+v, %v; want the one put again", c, err)
				}
			}},
		{"catalog", store.CatalogKey("acme"),
			func(t *testing.T, e *Engine) {
				if _, err := e.Campaigns.ReplaceCatalog("acme", []Action{{ID: 7, Nombre: "again", TipoCupon: "T7", Activa: true}}, t0); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, e *Engine) {
				c, err := e.Campaigns.Catalog("acme")
				if err != nil || c.Action(7) == nil {
					t.Errorf("catalog after check --repair and a restart: %+v, %v; want the one put again", c, err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, nil)
			if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d"}, t0); err != nil {
				t.Fatal(err)
			}
			damage(t, db, tc.key, `{"broken":`)
			e.Quarantine.afterScan = func() { tc.rewrite(t, e) }
			st, err := e.Quarantine.Check(context.Background(), "acme", true)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Damaged) != 1 || st.Repaired != 0 {
				t.Errorf("check --repair found %d damaged and repaired %d, want 1 found and none repaired", len(st.Damaged), st.Repaired)
			}
			tc.check(t, restart(db))
		})
	}
}

// TestQuarantineLeavesRecordWrittenAgain: a reader that holds no writer's
// lock (the learner, the evaluation, an export) may meet a damaged record
// that its writer then stores again, good, before the reader moves it to
// quarantine: the good one stays, and nothing is counted or quarantined.
func TestQuarantineLeavesRecordWrittenAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		now  []byte // what the key holds when the reader quarantines; nil: deleted
	}{{"written again", []byte(`{"good":true}`)}, {"deleted", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, nil)
			key := store.QualityKey("acme")
			stale := []byte(`{"broken":`)
			b := db.NewBatch()
			if tc.now != nil {
				b.Set(key, tc.now)
			} else {
				b.Delete(key)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if err := e.Records().Quarantine("acme", key, stale, errors.New("does not decode")); err != nil {
				t.Fatal(err)
			}
			got, err := db.Get(key)
			if tc.now == nil && !errors.Is(err, store.ErrNotFound) || tc.now != nil && (err != nil || !bytes.Equal(got, tc.now)) {
				t.Errorf("key holds %q, %v; want %q", got, err, tc.now)
			}
			if n := e.Quarantine.DamagedSeen(); n != 0 {
				t.Errorf("DamagedSeen = %d, want 0", n)
			}
			if _, err := db.Get(store.DamagedKey("acme", key)); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("quarantine entry: %v, want none", err)
			}
		})
	}
}

// TestReadersQuarantineOnTheirOwn: without any repair, the learner, export
// and deletion meet the broken records, quarantine them, and complete.
func TestReadersQuarantineOnTheirOwn(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	const ana = "ana-00000001"
	ingestFor(t, e, ana, "a", 2)
	plantBroken(t, e, db, ana)

	if _, err := e.Evaluator.Evaluate(context.Background(), "acme", EvalOptions{Replicates: 10}); err != nil {
		t.Fatalf("evaluate before the learner: %v", err)
	}
	advance(t, db, 40*24*time.Hour)
	ls, err := e.Learner.Learn("acme")
	if err != nil || ls.Damaged != 1 {
		t.Fatalf("learner: %+v %v, want 1 damaged", ls, err)
	}
	if _, err := e.Learner.Learn("acme"); err != nil {
		t.Fatalf("second learner pass: %v", err)
	}
	if e.Quarantine.DamagedSeen() != 1 {
		t.Errorf("DamagedSeen = %d, want 1 (the decision; export meets the event: package privacy)", e.Quarantine.DamagedSeen())
	}
}

// TestDecisionsSkipDamagedCustomerRecords: a customer whose features and
// decision state do not decode is decided online and in a batch (her
// features rebuilt from her events, TestDamagedFeaturesKeepConsent); both
// records go to quarantine.
func TestDecisionsSkipDamagedCustomerRecords(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	const ana, beto = "ana-00000001", "beto-0000002"
	ingestFor(t, e, ana, "a", 2)
	b := db.NewBatch()
	b.Set(store.FeaturesKey("acme", ana), []byte{0xff, 1, 2})
	b.Set(customerStateKey("acme", ana), []byte{0xee})
	b.Set(store.FeaturesKey("acme", beto), []byte("{not features"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := e.Decide("acme", Request{ClienteRef: ana, Canal: "push"}); err != nil {
		t.Fatalf("online decision: %v", err)
	}
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "x"}, t0); err != nil {
		t.Fatal(err)
	}
	bd, err := e.NewBatchDecider("acme", "lote_1", "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer bd.Close()
	if _, err := bd.Decide(beto, false); err != nil {
		t.Fatalf("batch decision: %v", err)
	}
	if err := bd.Flush(); err != nil {
		t.Fatal(err)
	}
	q, err := e.Quarantine.Quarantined("acme")
	if err != nil || len(q) != 3 {
		t.Fatalf("quarantine: %+v %v; want 3 records", q, err)
	}
}

// TestNamesRef: a ref counts where it stands whole, not inside a longer
// identifier of another customer.
func TestNamesRef(t *testing.T) {
	const ana = "ana-0001"
	long := strings.Repeat("a", 97) // its uvarint length is 'a', an ID byte
	tests := []struct {
		name string
		b    []byte
		ref  string
		want bool
	}{
		{"JSON field", []byte(`{"cliente_ref":"ana-0001","x":1}`), ana, true},
		{"inside a longer ref", []byte(`{"cliente_ref":"mariana-0001"}`), ana, false},
		{"longer ref after it", []byte(`{"cliente_ref":"ana-00012"}`), ana, false},
		{"whole b", []byte(ana), ana, true},
		{"cut short after the ref", []byte(`{"cliente_ref":"ana-0001`), ana, true},
		{"key component", []byte("ana-0001\x00\x80\x00\x00\x01id\x00"), ana, true},
		{"later key component", []byte("2026-11-02\x00envios\x00ana-0001\x00"), ana, true},
		{"key component of another", []byte("mariana-0001\x00"), ana, false},
		{"binary, length-prefixed", append(binAppendString([]byte{1, 'n'}, ana), 'Z', 'q'), ana, true},
		{"binary of another", binAppendString([]byte{1}, "mariana-0001"), ana, false},
		{"length prefix that is an ID byte", append(binAppendString([]byte("xy"), long), "k9"...), long, true},
		{"later occurrence whole", []byte("mariana-0001 ana-0001"), ana, true},
		{"empty ref", []byte("abc"), "", false},
	}
	for _, tt := range tests {
		if got := namesRef(tt.b, tt.ref); got != tt.want {
			t.Errorf("%s: namesRef(%q) = %v, want %v", tt.name, tt.b, got, tt.want)
		}
	}
}

// TestIdentifiers: the identifiers found in a damaged record include the
// refs it names, and are all refs namesRef takes for it, so that a
// deletion by keyed hash finds the customer whose damaged records it will
// erase. (A run of ID bytes after a byte that reads as its length is a
// candidate too: hashing one more string costs nothing.)
func TestIdentifiers(t *testing.T) {
	long := strings.Repeat("b", 100) // its uvarint length is 'd', an ID byte
	tests := []struct {
		name string
		b    []byte
		want []string // among the identifiers found
	}{
		{"JSON", []byte(`{"cliente_ref":"ana-0001","k":"short"}`), []string{"cliente_ref", "ana-0001"}},
		{"key components", []byte("2026-11-02\x00envios\x00ana-0001\x00"), []string{"2026-11-02", "ana-0001"}},
		{"binary", binAppendString([]byte{1, 2}, "ana-0001"), []string{"ana-0001"}},
		{"binary, ID length byte", append(binAppendString([]byte("xy"), long), "k9"...), []string{long}},
		{"too short", []byte(`{"k":"short"}`), nil},
	}
	for _, tt := range tests {
		seen := map[string]bool{}
		identifiers(tt.b, func(s string) { seen[s] = true })
		var missing []string
		for _, w := range tt.want {
			if !seen[w] {
				missing = append(missing, w)
			}
		}
		if diff := cmp.Diff([]string(nil), missing); diff != "" {
			t.Errorf("%s: identifiers not found (-want +got):\n%s", tt.name, diff)
		}
		if tt.want == nil && len(seen) != 0 {
			t.Errorf("%s: found %v, want none", tt.name, seen)
		}
		for s := range seen {
			if !namesRef(tt.b, s) {
				t.Errorf("%s: identifier %q not taken by namesRef", tt.name, s)
			}
			if len(s) < minRefLen || len(s) > maxRefLen {
				t.Errorf("%s: identifier %q is not of a cliente_ref's length", tt.name, s)
			}
		}
	}
}

// TestCheckStopsWithItsContext: admin check stops once its ctx ends (the
// admin client interrupted, serve stopping) instead of reading the whole
// store: it ran to its end, so that an interrupted check was logged as
// exiting 0 and one running at serve's shutdown kept the store open.
func TestCheckStopsWithItsContext(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	ingestFor(t, e, "ana-00000001", "a", 3*checkEvery)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := e.Quarantine.Check(ctx, "acme", false)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("check with its ctx ended: error %v, want context.Canceled", err)
	}
	if st != nil && st.Records > checkEvery {
		t.Errorf("check with its ctx ended read %d records, want at most %d", st.Records, checkEvery)
	}
	if st, err := e.Quarantine.Check(context.Background(), "acme", false); err != nil || st.Records < 3*checkEvery {
		t.Errorf("check: %v, %d records; want every record", err, st.Records)
	}
}
