package engine

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestDamagedFeaturesKeepConsent: a customer whose feature record does not
// decode keeps what her stored events say: her opt-out and her account
// closure hold for the decision that meets the damaged record, for the
// decisions after it and for the ingestion that folds her next events; the
// record is quarantined and rebuilt from her events, not read as a customer
// without history (who would be sent coupons she refused).
func TestDamagedFeaturesKeepConsent(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	baja := func(id, ref, clave string, at time.Time) IngestEvent {
		ev := Event{ID: id, ClienteRef: ref, TS: at, Tipo: Baja, Clave: clave}
		return IngestEvent{Event: ev, Canonical: []byte(id)}
	}
	e, db := newTestEngine(t, 2, nil)
	ingestFor(t, e, ana, "a", 3)
	ingestFor(t, e, beto, "b", 3)
	evs := []IngestEvent{baja("baja-ana", ana, BajaComunicaciones, t0.Add(-time.Minute)), baja("baja-beto", beto, BajaCuenta, t0.Add(-time.Minute))}
	if res, err := e.Ingester.Ingest("acme", evs); err != nil || res.Aceptados != 2 {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	want := map[string]float64{"ana baja_comunicaciones": 1, "ana frecuencia_30d": 3, "beto cuenta_cerrada": 1, "beto frecuencia_30d": 3}
	features := func(t *testing.T) map[string]float64 {
		t.Helper()
		got := map[string]float64{}
		for k, ref := range map[string]string{"ana": ana, "beto": beto} {
			f, err := e.CustomerFeatures("acme", ref)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"baja_comunicaciones", "cuenta_cerrada", "frecuencia_30d"} {
				if v, _ := f.Get(name, t0); v != 0 {
					got[k+" "+name] = v
				}
			}
		}
		return got
	}

	wantMotivo := map[string]string{ana: "el cliente se dio de baja de comunicaciones en este canal", beto: "cuenta cerrada: no se envían cupones"}
	damage(t, db, store.FeaturesKey("acme", ana), "\xff\x01\x02")
	damage(t, db, store.FeaturesKey("acme", beto), "\xff\x01\x02")
	for _, ref := range []string{ana, beto} { // the decision that meets the damaged record
		d, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push"})
		if err != nil || d.Accion != 0 || d.Motivo != wantMotivo[ref] {
			t.Errorf("decision for %s after her record was damaged: accion %d (%s), %v; want 0 (%s)", ref, d.Accion, d.Motivo, err, wantMotivo[ref])
		}
	}
	for _, ref := range []string{ana, beto} {
		if v, err := db.Get(store.FeaturesKey("acme", ref)); err != nil || !new(Features).Decode(v) {
			t.Errorf("feature record of %s after the decision met it damaged: %v; want it rebuilt", ref, err)
		}
	}
	if diff := cmp.Diff(want, features(t)); diff != "" {
		t.Errorf("features read after damage (-want +got):\n%s", diff)
	}

	damage(t, db, store.FeaturesKey("acme", ana), "\xff\x01\x02")
	damage(t, db, store.FeaturesKey("acme", beto), "\xff\x01\x02")
	ingestFor(t, e, ana, "a2", 1)
	ingestFor(t, e, beto, "b2", 1)
	want["ana frecuencia_30d"], want["beto frecuencia_30d"] = 4, 4 // both bought before the BAJA
	if diff := cmp.Diff(want, features(t)); diff != "" {
		t.Errorf("features after an ingestion met the damaged records (-want +got):\n%s", diff)
	}
	if q, err := e.Quarantine.Quarantined("acme"); err != nil || len(q) != 2 {
		t.Errorf("quarantine: %d records, %v; want 2 (the last damaged record of each customer)", len(q), err)
	}
}

// TestCheckRepairRebuildsFeatures: admin check --repair puts the features
// rebuilt from the customer's events in place of a damaged record it moves
// to quarantine, as the readers do, rather than leaving her without them.
func TestCheckRepairRebuildsFeatures(t *testing.T) {
	const ana = "ana-00000001"
	e, db := newTestEngine(t, 2, nil)
	ingestFor(t, e, ana, "a", 2)
	ev := Event{ID: "baja-ana", ClienteRef: ana, TS: t0.Add(-time.Minute), Tipo: Baja, Clave: BajaComunicaciones}
	if res, err := e.Ingester.Ingest("acme", []IngestEvent{{Event: ev, Canonical: []byte(ev.ID)}}); err != nil || res.Aceptados != 1 {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	damage(t, db, store.FeaturesKey("acme", ana), "\xff\x01\x02")
	st, err := e.Quarantine.Check(context.Background(), "acme", true)
	if err != nil || st.Repaired != 1 {
		t.Fatalf("check --repair: %+v %v; want 1 repaired", st, err)
	}
	v, err := db.Get(store.FeaturesKey("acme", ana))
	var f Features
	if err != nil || !f.Decode(v) || !f.OptedOut("push") {
		t.Errorf("feature record after the repair: %v, opted out %v; want it rebuilt, opted out", err, f.OptedOut("push"))
	}
}

// TestCustomersRebuildsDamagedFeatures: a batch's scan of the customers
// (segment todos, or a segment on her history) does not leave out a
// customer whose feature record is damaged: her features are rebuilt from
// her events, as a decision's read rebuilds them, and the record is
// quarantined and replaced.
func TestCustomersRebuildsDamagedFeatures(t *testing.T) {
	const ana, beto = "ana-00000001", "beto-0000002"
	e, db := newTestEngine(t, 2, nil)
	ingestFor(t, e, ana, "a", 3)
	ingestFor(t, e, beto, "b", 3)
	damage(t, db, store.FeaturesKey("acme", ana), "\xff\x01\x02")
	var got []string
	todos, err := ParseSegment(map[string]any{"todos": true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Customers("acme", todos, func(ref string) error { got = append(got, ref); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ana, beto}, got); diff != "" {
		t.Errorf("customers of segment todos (-want +got):\n%s", diff)
	}
	if v, err := db.Get(store.FeaturesKey("acme", ana)); err != nil || !new(Features).Decode(v) {
		t.Errorf("feature record after the scan met it damaged: %v; want it rebuilt", err)
	}
	if q, err := e.Quarantine.Quarantined("acme"); err != nil || len(q) != 1 {
		t.Errorf("quarantine: %d records, %v; want 1", len(q), err)
	}
}
