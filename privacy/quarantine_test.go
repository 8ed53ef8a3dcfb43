package privacy

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// plantBroken writes records of ana that do not decode (issue 17): a
// CUPON_RECIBIDO event whose caducidad is in year 10000, encoded as older
// releases did, and her decision record cut short.
func plantBroken(t *testing.T, e *engine.Engine, p *Service, db *store.DB, ana string) {
	t.Helper()
	if _, err := e.Decide("acme", engine.Request{ClienteRef: ana, Canal: "push"}); err != nil {
		t.Fatal(err)
	}
	var nonce string
	lo, hi := store.CustomerDecisionSpan("acme", ana)
	if err := db.Scan(lo, hi, func(k, _ []byte) error {
		if _, _, n, ok := store.ParseCustomerDecisionKey("acme", k); ok {
			nonce = n
		}
		return nil
	}); err != nil || nonce == "" {
		t.Fatalf("ana's decision index: %q %v", nonce, err)
	}
	rec, err := db.Get(p.rec.DecisionKey("acme", nonce))
	if err != nil {
		t.Fatal(err)
	}
	ev := engine.Event{ID: "cup-ev-1", ClienteRef: ana, TS: t0.Add(-time.Hour), Tipo: engine.CuponRecibido, Clave: "T1",
		CuponEmitidoID: "cup-ana-1", Caducidad: t0.Add(240 * time.Hour)}
	if res, err := e.Ingester.Ingest("acme", []engine.IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	v, err := db.Get(p.rec.EventKey("acme", ev.ID))
	if err != nil {
		t.Fatal(err)
	}
	ev.Caducidad = time.Date(10000, 1, 1, 13, 0, 0, 0, time.UTC)
	b := db.NewBatch()
	defer b.Close()
	b.Set(p.rec.DecisionKey("acme", nonce), rec[:len(rec)/2])
	b.Set(p.rec.EventKey("acme", ev.ID), ev.AppendEncode(append([]byte(nil), v[:32]...)))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

func advance(tb testing.TB, db *store.DB, d time.Duration) {
	tb.Helper()
	if _, err := db.UpdateTenant("acme", func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(d); return nil }); err != nil {
		tb.Fatal(err)
	}
}

// deleteAll deletes ref and runs a worker pass that must complete it.
func deleteAll(t *testing.T, p *Service, ref string) {
	t.Helper()
	if _, err := p.RequestDeletion("acme", ref, "ci"); err != nil {
		t.Fatal(err)
	}
	if ds, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || ds.Completed != 1 {
		t.Fatalf("deletion: %+v %v", ds, err)
	}
}

// TestExportAndDeletionAfterRepair: after admin check --repair moved the
// broken records to quarantine, the export counts them and the deletion
// erases the quarantined copies too.
func TestExportAndDeletionAfterRepair(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	const ana, beto = "ana-00000001", "beto-0000002"
	ingestFor(t, e, ana, "a", 3)
	ingestFor(t, e, beto, "b", 3)
	plantBroken(t, e, p, db, ana)
	if st, err := e.Quarantine.Check(context.Background(), "", true); err != nil || st.Repaired != 2 {
		t.Fatalf("check --repair: %+v %v", st, err)
	}
	x, err := p.Export("acme", ana, "ci", "trace")
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	if len(x.Eventos) != 3 || len(x.Decisiones) != 0 || x.EnCuarentena != 2 {
		t.Errorf("export: %d events, %d decisions, %d quarantined; want 3, 0, 2", len(x.Eventos), len(x.Decisiones), x.EnCuarentena)
	}
	if xb, err := p.Export("acme", beto, "ci", "trace"); err != nil || xb.EnCuarentena != 0 {
		t.Errorf("beto's export: %v, quarantined %d", err, xb.EnCuarentena)
	}
	deleteAll(t, p, ana)
	if holds(t, db, []byte(ana)) || holds(t, db, []byte("cup-ana-1")) {
		t.Error("the store still names the deleted customer (quarantine included)")
	}
	if n, _ := e.Quarantine.QuarantinedRecords(); n != 0 {
		t.Errorf("QuarantinedRecords after deletion = %d, want 0", n)
	}
}

// TestExportQuarantinesOnItsOwn: without any repair, the learner meets the
// broken decision and the export the broken event; both quarantine them
// and complete, and the deletion completes.
func TestExportQuarantinesOnItsOwn(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	const ana = "ana-00000001"
	ingestFor(t, e, ana, "a", 2)
	plantBroken(t, e, p, db, ana)
	advance(t, db, 40*24*time.Hour)
	if ls, err := e.Learner.Learn("acme"); err != nil || ls.Damaged != 1 {
		t.Fatalf("learner: %+v %v, want 1 damaged", ls, err)
	}
	x, err := p.Export("acme", ana, "ci", "trace")
	if err != nil || len(x.Eventos) != 2 || x.EnCuarentena != 2 {
		t.Fatalf("export: %v %+v", err, x)
	}
	if e.Quarantine.DamagedSeen() != 2 {
		t.Errorf("DamagedSeen = %d, want 2", e.Quarantine.DamagedSeen())
	}
	deleteAll(t, p, ana)
	if holds(t, db, []byte(ana)) {
		t.Error("the store still names the deleted customer")
	}
}

// TestDeletionReachesDamagedInPlace: deletion meets the damaged records
// where they were written (nobody quarantined them yet) and erases them.
func TestDeletionReachesDamagedInPlace(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	const ana = "ana-00000001"
	plantBroken(t, e, p, db, ana)
	deleteAll(t, p, ana)
	if holds(t, db, []byte(ana)) || holds(t, db, []byte("cup-ana-1")) {
		t.Error("the store still names the deleted customer")
	}
}

// TestDeletionPastDamagedDeletionRecords: a deletion queue entry or a
// deletion record that does not decode (contract §8) neither stops the
// worker nor loops: the deletion it stands for is still carried out, by
// the keyed hash its key holds, and so are the others.
func TestDeletionPastDamagedDeletionRecords(t *testing.T) {
	const ana, beto, otro = "ana-00000001", "beto-0000002", "otro-0000003"
	for _, tc := range []struct {
		name   string
		damage func(p *Service, db *store.DB) []byte // returns the key it damaged
	}{
		{"queue entry", func(p *Service, db *store.DB) []byte {
			lo, hi := store.DeletionQueueSpan("acme")
			var key []byte
			db.Scan(lo, hi, func(k, _ []byte) error {
				if _, h, ok := store.ParseDeletionQueueKey("acme", k); ok && h == p.CustomerHash("acme", ana) {
					key = append([]byte(nil), k...)
				}
				return nil
			})
			return key
		}},
		{"deletion record", func(p *Service, _ *store.DB) []byte {
			return deletionKey("acme", p.CustomerHash("acme", ana))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, p, db, _ := newTest(t, 1)
			ingestFor(t, e, ana, "a", 2)
			ingestFor(t, e, beto, "b", 2)
			ingestFor(t, e, otro, "o", 2)
			for _, ref := range []string{ana, beto} {
				if _, err := p.RequestDeletion("acme", ref, "ci"); err != nil {
					t.Fatal(err)
				}
			}
			key := tc.damage(p, db)
			if key == nil {
				t.Fatal("no key to damage")
			}
			b := db.NewBatch()
			b.Set(key, []byte(`{"hash":`))
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			st, err := p.ProcessDeletions(context.Background(), DeletionHooks{})
			if err != nil || st != (DeletionStats{Completed: 2}) {
				t.Fatalf("pass: %+v %v, want 2 completed", st, err)
			}
			for ref, want := range map[string]bool{ana: false, beto: false, otro: true} {
				if got := holds(t, db, []byte(ref)); got != want {
					t.Errorf("store holds %s = %v, want %v", ref, got, want)
				}
			}
			recs, err := p.Deletions("acme")
			if err != nil {
				t.Fatalf("deletions: %v", err)
			}
			var states []string
			for _, r := range recs {
				states = append(states, r.Estado)
			}
			if diff := cmp.Diff([]string{DeletionCompleted, DeletionCompleted}, states); diff != "" {
				t.Errorf("deletion states (-want +got):\n%s", diff)
			}
			if n, _ := p.PendingDeletions(); n != 0 {
				t.Errorf("queue after the pass: %d entries, want 0", n)
			}
		})
	}
}

// TestDeletionReachesDamagedLogAndHeldBatches: an access-log entry or a
// held event batch that no longer decodes but still names the customer
// goes with the customer's deletion (contract §8), like a damaged event;
// the others stay.
func TestDeletionReachesDamagedLogAndHeldBatches(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	for _, tc := range []struct {
		name string
		key  func(i int) []byte
	}{
		{"access-log entry", func(i int) []byte {
			return store.AccessLogKey("acme", t0.Add(time.Duration(i)*time.Second), fmt.Sprintf("tr-%d", i))
		}},
		{"held event batch", func(i int) []byte {
			return store.QuarantineKey("acme", t0.Add(time.Duration(i)*time.Second), fmt.Sprintf("tr-%d", i))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p, db, _ := newTest(t, 1)
			b := db.NewBatch()
			b.Set(tc.key(0), []byte(`{"cliente_ref":"`+ana+`","eventos":[{"cliente_ref":"`+ana+`"`)) // cut short
			b.Set(tc.key(1), []byte(`{"cliente_ref":"`+beto+`","eventos":[{"cliente_ref":"`+beto+`"`))
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			deleteAll(t, p, ana)
			for ref, want := range map[string]bool{ana: false, beto: true} {
				if got := holds(t, db, []byte(ref)); got != want {
					t.Errorf("store holds %s = %v, want %v", ref, got, want)
				}
			}
		})
	}
}

// TestAccessLogSkipsDamagedEntries: an access-log entry that does not
// decode neither fails the listing ("admin access-log") nor hides the
// others: it is moved to quarantine (reported by admin check and
// /metrics), and the customer's deletion still reaches it there.
func TestAccessLogSkipsDamagedEntries(t *testing.T) {
	const ana = "ana-00000001"
	e, p, db, _ := newTest(t, 1)
	for i, trace := range []string{"tr-0", "tr-2"} {
		if _, err := p.Export("acme", ana, "ci", trace); err != nil {
			t.Fatalf("export %d: %v", i, err)
		}
	}
	damaged := store.AccessLogKey("acme", t0.Add(time.Second), "tr-1")
	b := db.NewBatch()
	b.Set(damaged, []byte(`{"at":"2026-11-02T12:00:01Z","cliente_ref":"`+ana+`","trace_id":`)) // cut short
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	got, err := p.AccessLog("acme")
	if err != nil {
		t.Fatalf("access log with a damaged entry: %v", err)
	}
	var traces []string
	for _, a := range got {
		traces = append(traces, a.TraceID)
	}
	if diff := cmp.Diff([]string{"tr-0", "tr-2"}, traces); diff != "" {
		t.Errorf("access-log entries (-want +got):\n%s", diff)
	}
	q, err := e.Quarantine.Quarantined("acme")
	if err != nil || len(q) != 1 || q[0].Table != "access_log" {
		t.Errorf("quarantine after the listing: %+v %v, want the damaged access-log entry", q, err)
	}
	deleteAll(t, p, ana)
	if holds(t, db, []byte(ana)) {
		t.Error("the store still names the deleted customer (quarantined access-log entry)")
	}
}

// TestDeletionStrandedByRepair: "admin check --repair" moves to quarantine
// a deletion queue entry that does not decode, or a deletion record; the
// deletion, still programado (or with no record left), must still run: the
// worker queues it again by keyed hash and completes it.
func TestDeletionStrandedByRepair(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	for _, tc := range []struct {
		name   string
		damage func(p *Service, db *store.DB) [][]byte // the keys to damage
	}{
		{"queue entry", func(p *Service, db *store.DB) [][]byte {
			return [][]byte{queueKeyOf(t, p, db, ana)}
		}},
		{"queue entry and deletion record", func(p *Service, db *store.DB) [][]byte {
			return [][]byte{queueKeyOf(t, p, db, ana), deletionKey("acme", p.CustomerHash("acme", ana))}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, p, db, _ := newTest(t, 1)
			ingestFor(t, e, ana, "a", 2)
			ingestFor(t, e, beto, "b", 2)
			if _, err := p.RequestDeletion("acme", ana, "ci"); err != nil {
				t.Fatal(err)
			}
			keys := tc.damage(p, db)
			b := db.NewBatch()
			for _, k := range keys {
				b.Set(k, []byte(`{"hash":`))
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if st, err := e.Quarantine.Check(context.Background(), "", true); err != nil || st.Repaired != len(keys) {
				t.Fatalf("check --repair: %+v %v", st, err)
			}
			st, err := p.ProcessDeletions(context.Background(), DeletionHooks{})
			if err != nil || st != (DeletionStats{Completed: 1}) {
				t.Fatalf("pass: %+v %v, want 1 completed", st, err)
			}
			for ref, want := range map[string]bool{ana: false, beto: true} {
				if got := holds(t, db, []byte(ref)); got != want {
					t.Errorf("store holds %s = %v, want %v", ref, got, want)
				}
			}
			rec, err := p.Deletion("acme", ana)
			if err != nil || rec == nil || rec.Estado != DeletionCompleted {
				t.Errorf("ana's deletion record: %+v %v, want completado", rec, err)
			}
			if n, _ := p.PendingDeletions(); n != 0 {
				t.Errorf("queue after the pass: %d entries, want 0", n)
			}
		})
	}
}

// queueKeyOf returns the key of ref's deletion queue entry.
func queueKeyOf(t *testing.T, p *Service, db *store.DB, ref string) []byte {
	t.Helper()
	lo, hi := store.DeletionQueueSpan("acme")
	var key []byte
	db.Scan(lo, hi, func(k, _ []byte) error {
		if _, h, ok := store.ParseDeletionQueueKey("acme", k); ok && h == p.CustomerHash("acme", ref) {
			key = append([]byte(nil), k...)
		}
		return nil
	})
	if key == nil {
		t.Fatalf("no deletion queue entry for %s", ref)
	}
	return key
}

// TestExportAndDeletionPastDamagedLink: a coupon attribution link of the
// customer that does not decode (contract §8) neither fails the export,
// which moves it to quarantine, nor stops the deletion, which erases it
// where it is.
func TestExportAndDeletionPastDamagedLink(t *testing.T) {
	for _, exportFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("export first %v", exportFirst), func(t *testing.T) {
			e, p, db, _ := newTest(t, 2)
			const ana = "ana-00000001"
			ev := engine.Event{ID: "cup-ev-1", ClienteRef: ana, TS: t0.Add(-time.Hour), Tipo: engine.CuponRecibido, Clave: "T1",
				CuponEmitidoID: "cup-ana-1", Caducidad: t0.Add(240 * time.Hour)}
			if res, err := e.Ingester.Ingest("acme", []engine.IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
				t.Fatalf("ingest: %+v %v", res, err)
			}
			b := db.NewBatch()
			b.Set(p.rec.AttributionKey("acme", "cup-ana-1"), []byte(`{"cliente_ref":7}`))
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if exportFirst {
				if x, err := p.Export("acme", ana, "ci", "trace"); err != nil || len(x.Eventos) != 1 || len(x.VinculosCupon) != 0 {
					t.Fatalf("export: %v %+v, want the event and no link", err, x)
				}
			}
			deleteAll(t, p, ana)
			if holds(t, db, []byte(ana)) || holds(t, db, []byte("cup-ana-1")) {
				t.Error("the store still names the deleted customer")
			}
		})
	}
}

// TestDeletionDuringHeldRelease: a customer's events held by the abuse
// quarantine before their deletion must not come back when the operator
// releases the quarantine while the deletion runs. The release reads a
// held batch, checks its events, then applies them; a deletion that erases
// the customer from the batch in between (here, from the check) must win:
// the release applies the batch as it stands after the erasure.
func TestDeletionDuringHeldRelease(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	e, p, db, _ := newTest(t, 1)
	byRaw := map[string]engine.Event{}
	var evs []engine.IngestEvent
	for i, ref := range []string{ana, beto, ana} {
		ev := engine.Event{ID: fmt.Sprintf("held-%d", i), ClienteRef: ref, TS: t0.Add(-time.Hour), Tipo: engine.CompraCat,
			Clave: "abarrotes", ValorCents: 1000, TicketID: fmt.Sprintf("t-held-%d", i), MargenCents: 100}
		raw := fmt.Sprintf(`{"event_id":%q,"cliente_ref":%q}`, ev.ID, ref)
		byRaw[raw] = ev
		evs = append(evs, engine.IngestEvent{Index: i, Event: ev, Canonical: []byte(raw)})
	}
	d := engine.Delivery{ClientID: "c1", Trace: "tr-1", At: t0, Now: t0, Hold: true}
	if res, err := e.Ingester.Receive("acme", evs, d); err != nil || res.Aceptados != 3 {
		t.Fatalf("hold: %+v %v", res, err)
	}
	erased := false
	check := func(raw []byte, i int) (engine.IngestEvent, bool, error) {
		if !erased {
			erased = true
			deleteAll(t, p, ana)
		}
		ev, ok := byRaw[string(raw)]
		if !ok {
			return engine.IngestEvent{}, false, fmt.Errorf("held event %s does not parse", raw)
		}
		return engine.IngestEvent{Index: i, Event: ev, Canonical: raw}, true, nil
	}
	acc, _, err := e.Ingester.ReleaseHeld("acme", t0, check)
	if err != nil {
		t.Fatal(err)
	}
	if acc != 1 {
		t.Errorf("release accepted %d events, want 1 (beto's)", acc)
	}
	for ref, want := range map[string]bool{ana: false, beto: true} {
		if got := holds(t, db, []byte(ref)); got != want {
			t.Errorf("store holds %s = %v, want %v", ref, got, want)
		}
	}
}

// TestExportRacingDeletion: an export reads whether the customer has a
// deletion record, then writes its access-log entry with the raw
// cliente_ref when there is none. A deletion requested and completed in
// between must not leave that entry behind with the raw cliente_ref: the
// access log names a deleted customer by keyed hash only.
func TestExportRacingDeletion(t *testing.T) {
	const ana = "ana-00000001"
	e, p, db, _ := newTest(t, 1)
	ingestFor(t, e, ana, "a", 2)
	done := make(chan struct{})
	p.beforeAccessLog = func() {
		p.beforeAccessLog = nil
		go func() {
			defer close(done)
			if _, err := p.RequestDeletion("acme", ana, "ci"); err != nil {
				t.Error(err)
				return
			}
			if st, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Completed != 1 {
				t.Errorf("deletion: %+v %v", st, err)
			}
		}()
		// Not a timing assertion: an export that holds the deletion back
		// until its entry is written makes this wait run out.
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}
	if _, err := p.Export("acme", ana, "ci", "tr-1"); err != nil {
		t.Fatal(err)
	}
	<-done
	if holds(t, db, []byte(ana)) {
		t.Error("the store names the deleted customer after an export that raced the deletion")
	}
	log, err := p.AccessLog("acme")
	if err != nil || len(log) != 1 || log[0].ClienteRef != "" || log[0].ClienteHash != p.CustomerHash("acme", ana) {
		t.Errorf("access log: %+v %v; want one entry naming the customer by keyed hash", log, err)
	}
}

// TestQuarantineOfAnotherCustomerWhoseRefHoldsIt: ana's cliente_ref is a
// part of mariana's. Mariana's quarantined records are not ana's: ana's
// export does not count them (that told ana of another customer's data)
// and ana's deletion leaves them, as mariana's own export still shows.
func TestQuarantineOfAnotherCustomerWhoseRefHoldsIt(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	const ana, mariana = "ana-0001", "mariana-0001"
	ingestFor(t, e, ana, "a", 2)
	plantBroken(t, e, p, db, mariana)
	if st, err := e.Quarantine.Check(context.Background(), "", true); err != nil || st.Repaired != 2 {
		t.Fatalf("check --repair: %+v %v", st, err)
	}
	x, err := p.Export("acme", ana, "ci", "trace")
	if err != nil || x.EnCuarentena != 0 {
		t.Errorf("ana's export: en_cuarentena %d (%v), want 0: the quarantined records are mariana's", x.EnCuarentena, err)
	}
	deleteAll(t, p, ana)
	if n, _ := e.Quarantine.QuarantinedRecords(); n != 2 {
		t.Errorf("QuarantinedRecords after ana's deletion = %d, want mariana's 2", n)
	}
	if x, err := p.Export("acme", mariana, "ci", "trace"); err != nil || x.EnCuarentena != 2 {
		t.Errorf("mariana's export after ana's deletion: en_cuarentena %d (%v), want 2", x.EnCuarentena, err)
	}
}

// TestDeletionByHashFindsDamagedOnly: a deletion known only by keyed hash
// (a backup's ledger, a damaged queue entry) finds its customer in the
// damaged-record quarantine too, when that is all the store holds of them,
// and erases it.
func TestDeletionByHashFindsDamagedOnly(t *testing.T) {
	ev := engine.Event{ID: "ev-h1", ClienteRef: "hugo-0000001", TS: t0.Add(-time.Hour), Tipo: engine.CompraCat,
		Clave: "abarrotes", ValorCents: 100, TicketID: "t-h1"}
	enc := ev.AppendEncode(nil)
	tests := []struct {
		name string
		ref  string
		key  func(p *Service) []byte
		v    []byte
	}{
		{"binary event cut short", ev.ClienteRef, func(p *Service) []byte { return p.rec.EventKey("acme", ev.ID) }, enc[:len(enc)-3]},
		{"features, by key", "ines-0000001", func(p *Service) []byte { return p.rec.FeaturesKey("acme", "ines-0000001") }, []byte{0xff, 0x01}},
		{"JSON cut short", "juan-0000001", func(*Service) []byte { return store.IdempotencyKey("acme", "k-j1") },
			[]byte(`{"cliente_ref":"juan-0000001","answer":{"decis`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p, db, _ := newTest(t, 2)
			plant(t, db, tt.key(p), tt.v)
			if err := p.rec.Quarantine("acme", tt.key(p), tt.v, fmt.Errorf("planted")); err != nil {
				t.Fatal(err)
			}
			if !holds(t, db, []byte(tt.ref)) {
				t.Fatal("the planted damaged record does not name the customer")
			}
			if _, err := p.ScheduleDeletionByHash("acme", p.CustomerHash("acme", tt.ref), t0, "ci"); err != nil {
				t.Fatal(err)
			}
			if st, err := p.ProcessDeletions(context.Background(), DeletionHooks{}); err != nil || st.Completed != 1 {
				t.Fatalf("pass: %+v %v", st, err)
			}
			if holds(t, db, []byte(tt.ref)) {
				t.Error("the deletion by hash left the customer's damaged record")
			}
		})
	}
}

// plant stores v at key, as a record damaged on disk.
func plant(t *testing.T, db *store.DB, key, v []byte) {
	t.Helper()
	b := db.NewBatch()
	defer b.Close()
	b.Set(key, v)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestExportCountsQuarantinedRecordsThatDoNotNameRef: records moved to
// quarantine before the export whose damaged bytes no longer hold the
// cliente_ref are still the customer's: their index entries name them, and
// the export, which finds them missing from their tables, counts them.
func TestExportCountsQuarantinedRecordsThatDoNotNameRef(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	const ana = "ana-00000001"
	ingestFor(t, e, ana, "a", 3)
	if _, err := e.Decide("acme", engine.Request{ClienteRef: ana, Canal: "push"}); err != nil {
		t.Fatal(err)
	}
	var nonce string
	lo, hi := store.CustomerDecisionSpan("acme", ana)
	if err := db.Scan(lo, hi, func(k, _ []byte) error {
		_, _, nonce, _ = store.ParseCustomerDecisionKey("acme", k)
		return nil
	}); err != nil || nonce == "" {
		t.Fatalf("ana's decision index: %q %v", nonce, err)
	}
	var evKey []byte
	lo, hi = store.CustomerEventSpan("acme", ana)
	if err := db.Scan(lo, hi, func(k, _ []byte) error {
		if _, _, id, ok := store.ParseCustomerEventKey("acme", k); ok && evKey == nil {
			evKey = p.rec.EventKey("acme", id)
		}
		return nil
	}); err != nil || evKey == nil {
		t.Fatalf("ana's event index: %v", err)
	}
	b := db.NewBatch()
	defer b.Close()
	b.Set(p.rec.DecisionKey("acme", nonce), []byte("{\"roto"))
	b.Set(evKey, bytes.Repeat([]byte{0xff}, 40))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Quarantine.Check(context.Background(), "", true); err != nil || st.Repaired != 2 {
		t.Fatalf("check --repair: %+v %v", st, err)
	}
	x, err := p.Export("acme", ana, "ci", "trace")
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Eventos) != 2 || len(x.Decisiones) != 0 || x.EnCuarentena != 2 {
		t.Errorf("export: %d events, %d decisions, %d quarantined; want 2, 0, 2", len(x.Eventos), len(x.Decisiones), x.EnCuarentena)
	}
}

// TestErasedHeldEventIsNewAgain: the erasure of a customer whose events are
// held by the abuse quarantine takes them out of the held-event index too,
// so an erased event's event_id sent again is accepted as new (README: a
// new history), while another customer's held event sent again is still
// a duplicate.
func TestErasedHeldEventIsNewAgain(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	e, p, _, _ := newTest(t, 1)
	held := func(i int, ref string) engine.IngestEvent {
		ev := engine.Event{ID: fmt.Sprintf("held-%d", i), ClienteRef: ref, TS: t0.Add(-time.Hour), Tipo: engine.CompraCat,
			Clave: "abarrotes", ValorCents: 1000, TicketID: fmt.Sprintf("t-held-%d", i), MargenCents: 100}
		raw := fmt.Sprintf(`{"event_id":%q,"cliente_ref":%q}`, ev.ID, ref)
		return engine.IngestEvent{Index: i, Event: ev, Canonical: []byte(raw)}
	}
	d := engine.Delivery{ClientID: "c1", Trace: "tr-1", At: t0, Now: t0, Hold: true}
	if res, err := e.Ingester.Receive("acme", []engine.IngestEvent{held(0, ana), held(1, beto)}, d); err != nil || res.Aceptados != 2 {
		t.Fatalf("hold: %+v %v", res, err)
	}
	deleteAll(t, p, ana)
	d.Trace, d.At = "tr-2", t0.Add(time.Second)
	res, err := e.Ingester.Receive("acme", []engine.IngestEvent{held(0, ana), held(1, beto)}, d)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(engine.IngestResult{Aceptados: 1, Duplicados: 1}, res); diff != "" {
		t.Errorf("resend after ana's erasure (-want +got):\n%s", diff)
	}
}

// TestStrandedSweepHourly: the worker looks for stranded deletions at its
// first pass and then hourly, not at every pass: a sweep reads every
// deletion record ever made. A deletion left programado with no queue
// entry while serving (its entry lost) waits for the next sweep, within
// the hour, and then completes.
func TestStrandedSweepHourly(t *testing.T) {
	const ana = "ana-00000001"
	e, p, db, clk := newTest(t, 1)
	ingestFor(t, e, ana, "a", 2)
	pass := func() DeletionStats {
		t.Helper()
		st, err := p.ProcessDeletions(context.Background(), DeletionHooks{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	pass() // the first pass sweeps
	if _, err := p.RequestDeletion("acme", ana, "ci"); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Delete(queueKeyOf(t, p, db, ana))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	var got []int
	for _, after := range []time.Duration{2 * time.Minute, 30 * time.Minute, 31 * time.Minute} {
		clk.Advance(after)
		got = append(got, pass().Completed)
	}
	if diff := cmp.Diff([]int{0, 0, 1}, got); diff != "" {
		t.Errorf("deletions completed by the passes at +2, +32 and +63 minutes (-want +got):\n%s", diff)
	}
}
