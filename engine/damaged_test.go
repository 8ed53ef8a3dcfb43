package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/clock"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// damage overwrites the record at key with bytes that do not decode as it.
func damage(tb testing.TB, db *store.DB, key []byte, v string) {
	tb.Helper()
	b := db.NewBatch()
	defer b.Close()
	b.Set(key, []byte(v))
	if err := b.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// restart is a new engine over db, with nothing of the old one's caches.
func restart(db *store.DB) *Engine {
	return New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clock.NewFake(t0).Now, Seed: 7})
}

// quarantinedTables lists the tables of acme's quarantined records.
func quarantinedTables(tb testing.TB, e *Engine) []string {
	tb.Helper()
	q, err := e.Quarantine.Quarantined("acme")
	if err != nil {
		tb.Fatal(err)
	}
	out := []string{}
	for _, d := range q {
		out = append(out, d.Table)
	}
	return out
}

// TestDamagedIdempotencyRecord: an Idempotency-Key whose record does not
// decode (the record, or the answer it holds) is moved to quarantine and
// read as absent: the request is answered afresh, with the decision whose
// reward window the first answer opened, never with a 500; admin check no
// longer finds it. Pruning moves such a record too instead of keeping it
// for ever.
func TestDamagedIdempotencyRecord(t *testing.T) {
	req := Request{ClienteRef: "idem-ana", Canal: "push", Idempotency: Idempotency{Key: "k-1", BodyHash: HashBody([]byte("b"))}}
	answer, err := json.Marshal(idemRecord{BodyHash: req.Idempotency.BodyHash, At: t0, Answer: json.RawMessage(`{"accion":"uno"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, stored string }{
		{"record", `{"h":"not a hash"`},
		{"answer", string(answer)},
		{"wrong type", `{"at":12}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, nil)
			first, err := e.Decide("acme", req)
			if err != nil {
				t.Fatal(err)
			}
			damage(t, db, store.IdempotencyKey("acme", "k-1"), tc.stored)
			again, err := e.Decide("acme", req)
			if err != nil {
				t.Fatalf("repeat over a damaged record: %v", err)
			}
			if again.DecisionID != first.DecisionID || again.Accion != 0 {
				t.Errorf("repeat answered %s accion %d, want the open window's decision %s with accion 0", again.DecisionID, again.Accion, first.DecisionID)
			}
			if diff := cmp.Diff([]string{"idempotency"}, quarantinedTables(t, e)); diff != "" {
				t.Errorf("quarantine (-want +got):\n%s", diff)
			}
			if _, err := e.Decide("acme", req); err != nil { // the fresh answer's record replays
				t.Fatalf("third request: %v", err)
			}

			damage(t, db, store.IdempotencyKey("acme", "k-2"), tc.stored)
			if st, err := e.Quarantine.Check(context.Background(), "acme", false); err != nil || len(st.Damaged) != 1 {
				t.Fatalf("admin check: %+v %v, want the record of k-2", st, err)
			}
			if _, err := e.PruneIdempotency("acme"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Idempotency("acme", "k-2"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("damaged record of k-2 after pruning: %v, want it moved to quarantine", err)
			}
			if diff := cmp.Diff([]string{"idempotency", "idempotency"}, quarantinedTables(t, e)); diff != "" {
				t.Errorf("quarantine after pruning (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDamagedCampaignRecord: a campaign whose record does not decode is
// moved to quarantine; until it is defined again its online decisions send
// nothing (its caps cannot be read, so none could be kept) and say why, a
// batch for it is refused as for an undefined campaign, GET finds nothing,
// also after a restart; PUT defines it again and sends resume.
func TestDamagedCampaignRecord(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	campaignSends(t, e, 50, 1)
	damage(t, db, store.CampaignKey("acme", "c1"), `{"campana_id":"c1","max_envios":"many"}`)
	for run, e := range []*Engine{restart(db), restart(db)} { // the second meets it in quarantine
		for i := range 20 {
			d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("dmg-%d-%02d", run, i), Canal: "push", CampanaID: "c1"})
			if err != nil {
				t.Fatalf("run %d: decision over a damaged campaign: %v", run, err)
			}
			if d.Accion != 0 || !strings.Contains(d.Motivo, "c1") {
				t.Fatalf("run %d: accion %d motivo %q, want 0 and a reason naming the campaign", run, d.Accion, d.Motivo)
			}
		}
		if _, err := e.Campaigns.Campaign("acme", "c1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("run %d: GET of the damaged campaign: %v, want ErrNotFound", run, err)
		}
		if _, err := e.NewBatchDecider("acme", "lote_1", "c1"); !errors.Is(err, ErrNoCampaign) {
			t.Errorf("run %d: batch for the damaged campaign: %v, want ErrNoCampaign", run, err)
		}
	}
	if diff := cmp.Diff([]string{"campaign"}, quarantinedTables(t, e)); diff != "" {
		t.Errorf("quarantine (-want +got):\n%s", diff)
	}
	e = restart(db)
	if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "again"}, t0); err != nil {
		t.Fatalf("PUT over the quarantined campaign: %v", err)
	}
	sends := 0
	for i := 0; sends == 0 && i < 500; i++ {
		d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("again-%03d", i), Canal: "push", CampanaID: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Accion != 0 {
			sends++
		}
	}
	if sends == 0 {
		t.Error("no sends after the campaign was defined again")
	}
}

// TestDamagedBudgetRecord: a campaign's budget record that does not decode
// is moved to quarantine and the budget counts as spent at the campaign's
// caps (the spend is unknown: any lower count could overspend), stored so
// at once, also when the record was met by admin check --repair; a
// rejection still gives its send back; raising the cap with PUT lets
// exactly that many more sends go.
func TestDamagedBudgetRecord(t *testing.T) {
	for _, repair := range []bool{false, true} {
		t.Run(fmt.Sprintf("repair=%v", repair), func(t *testing.T) {
			e, db := newTestEngine(t, 1, nil)
			ids := campaignSends(t, e, 3, 1)
			damage(t, db, store.BudgetKey("acme", "c1"), `{"envios":`)
			if repair {
				if st, err := e.Quarantine.Check(context.Background(), "acme", true); err != nil || st.Repaired != 1 {
					t.Fatalf("check --repair: %+v %v", st, err)
				}
			}
			e = restart(db)
			for i := range 200 {
				d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("dmg-%03d", i), Canal: "push", CampanaID: "c1"})
				if err != nil {
					t.Fatalf("decision over a damaged budget: %v", err)
				}
				if d.Accion != 0 {
					t.Fatalf("send %d over a damaged budget: the campaign may overspend", i)
				}
			}
			want := budget{Envios: 3, DescuentoCents: unknownSpend}
			if diff := cmp.Diff(want, storedBudget(t, db)); diff != "" {
				t.Errorf("stored budget (-want +got):\n%s", diff)
			}
			if _, err := e.Confirm("acme", ids[0], Confirmation{Ejecutada: false, MotivoRechazo: "no"}); err != nil {
				t.Fatalf("rejection: %v", err)
			}
			five := int64(5) // 3 counted, 1 given back, 2 more
			if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &five}, t0); err != nil {
				t.Fatal(err)
			}
			sends := 0
			for i := range 400 {
				d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("more-%03d", i), Canal: "push", CampanaID: "c1"})
				if err != nil {
					t.Fatal(err)
				}
				if d.Accion != 0 {
					sends++
				}
			}
			if sends != 3 {
				t.Errorf("%d sends after the cap went from 3 to 5 and one send came back, want 3", sends)
			}
			if diff := cmp.Diff([]string{"budget"}, quarantinedTables(t, e)); diff != "" {
				t.Errorf("quarantine (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDamagedQualityAndAttribution: a data-quality record or a coupon's
// attribution link that does not decode is moved to quarantine and read as
// absent (counters from zero, a link not yet seen): ingestion, which reads
// both, and the learner, which reads the counters, go on instead of failing
// every request and pass; admin check finds such records.
func TestDamagedQualityAndAttribution(t *testing.T) {
	const ref = "dmg-ana-0001"
	coupon := func(id string, tipo EventType) IngestEvent {
		ev := Event{ID: id, ClienteRef: ref, TS: t0.Add(-time.Hour), Tipo: tipo, Clave: "T1", CuponEmitidoID: "cup-1"}
		if tipo == CuponRedimido {
			ev.ValorCents, ev.TicketID = 500, "tk-1"
		}
		return IngestEvent{Event: ev, Canonical: []byte(id)}
	}
	for _, tc := range []struct {
		name  string
		key   []byte
		value string
		table string
	}{
		{"quality", store.QualityKey("acme"), `{"eventos_aceptados":"many"}`, "quality"},
		{"attribution", store.AttributionKey("acme", "cup-1"), `{"cliente_ref":7}`, "attribution"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
			if _, err := e.Decide("acme", Request{ClienteRef: ref, Canal: "push"}); err != nil {
				t.Fatal(err)
			}
			ingestAll(t, e, coupon("dmg-ev-1", CuponRecibido))
			damage(t, db, tc.key, tc.value)
			if st, err := e.Quarantine.Check(context.Background(), "acme", false); err != nil || len(st.Damaged) != 1 {
				t.Errorf("admin check: %+v %v, want the damaged %s record", st, err, tc.table)
			}
			e = restart(db) // nothing of the old engine's caches
			res, err := e.Ingester.Ingest("acme", []IngestEvent{coupon("dmg-ev-2", CuponRedimido)})
			if err != nil || res.Aceptados != 1 {
				t.Fatalf("ingest past the damaged %s record: %+v %v", tc.table, res, err)
			}
			advance(t, db, 2*24*time.Hour)
			if st, err := e.Learner.Learn("acme"); err != nil || !st.Worked() {
				t.Fatalf("learner pass past the damaged %s record: %+v %v", tc.table, st, err)
			}
			if q, err := e.Ingester.Quality("acme"); err != nil || q.Redenciones == 0 {
				t.Errorf("quality: %+v %v, want the redemption counted", q, err)
			}
			if diff := cmp.Diff([]string{tc.table}, quarantinedTables(t, e)); diff != "" {
				t.Errorf("quarantine (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDamagedCatalog: a catalog record that does not decode no longer
// stops the tenant (every decision, ingestion and the learner failed on
// loading its state): it is moved to quarantine, reported by admin check,
// and read as the empty catalog, so decisions answer nothing (action 0)
// until the catalog is put again, after which coupons are sent again.
func TestDamagedCatalog(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	damage(t, db, store.CatalogKey("acme"), `{"acciones":"all of them"}`)
	if st, err := e.Quarantine.Check(context.Background(), "acme", false); err != nil || len(st.Damaged) != 1 {
		t.Errorf("admin check: %+v %v, want the damaged catalog record", st, err)
	}
	e = restart(db)
	d, err := e.Decide("acme", Request{ClienteRef: "dmg-cat-0001", Canal: "push"})
	if err != nil || d.Accion != 0 {
		t.Fatalf("decision past the damaged catalog: %+v %v, want action 0", d, err)
	}
	if diff := cmp.Diff([]string{"catalog"}, quarantinedTables(t, e)); diff != "" {
		t.Errorf("quarantine (-want +got):\n%s", diff)
	}
	if _, err := e.Campaigns.ReplaceCatalog("acme", []Action{{ID: 1, Nombre: "uno", TipoCupon: "T1", CostoEnvioCents: 50, DescuentoMaxCents: 1000, Activa: true}}, t0); err != nil {
		t.Fatal(err)
	}
	if c, err := e.Campaigns.Catalog("acme"); err != nil || len(c.Acciones) != 1 {
		t.Errorf("catalog put again: %+v %v", c, err)
	}
}

// storedModelWith is the stored form of a fresh model of cfg after edit
// changed its JSON fields.
func storedModelWith(tb testing.TB, cfg policy.Config, edit func(f map[string]any)) string {
	tb.Helper()
	b, err := policy.New(cfg).Marshal("v7-damaged")
	if err != nil {
		tb.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		tb.Fatal(err)
	}
	edit(f)
	if b, err = json.Marshal(f); err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// TestDamagedModel: a stored model that does not load (damaged JSON, or
// numbers no model could have stored) is moved to quarantine and the
// tenant decides from the prior: every explained decision's probabilities
// are in [0, 1] and sum to 1, and the status says why learning restarted.
// A gate band's promise of 5 used to load and make never-send's
// probability negative.
func TestDamagedModel(t *testing.T) {
	cfg := policy.DefaultConfig()
	cfg.GateSendZ = -50 // the choice is a coupon: the band's share decides
	for _, tc := range []struct{ name, stored string }{
		{"truncated", `{"format":5,"politica_version":"v7","n":3,"phi":[1,2`},
		{"band promise above 1", storedModelWith(t, cfg, func(f map[string]any) {
			band := map[string]any{"test": map[string]any{}, "fast": map[string]any{}, "promise": 5.0}
			f["guard"].(map[string]any)["gate_bands"] = []any{band, band, band, band}
		})},
		{"residual variance that overflows the fit", storedModelWith(t, cfg, func(f map[string]any) { f["res_ss"] = 1e308 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, db := newTestEngine(t, 2, nil)
			damage(t, db, store.ModelKey("acme", 1), tc.stored)
			e := New(Config{DB: db, Secrets: store.TestSecrets(), Log: zerolog.Nop(), Now: clock.NewFake(t0).Now, Seed: 7, Policy: &cfg})
			for i := range 40 {
				d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("dmg-model-%04d", i), Canal: "push", Explain: true})
				if err != nil {
					t.Fatalf("decision past the damaged model: %v", err)
				}
				var sum float64
				for _, a := range d.Detalle.Acciones {
					if !(a.Probabilidad >= 0 && a.Probabilidad <= 1) {
						t.Fatalf("probabilities %+v", d.Detalle.Acciones)
					}
					sum += a.Probabilidad
				}
				if !(d.Propension > 0 && d.Propension <= 1) || sum < 1-1e-9 || sum > 1+1e-9 {
					t.Fatalf("propensity %v, probabilities %+v", d.Propension, d.Detalle.Acciones)
				}
			}
			st, err := e.Learner.Status("acme")
			if err != nil || st.ModelRestarted != "its stored model did not decode (quarantined)" || st.PoliticaVersion != "v0-prior" {
				t.Errorf("status %+v %v, want a restart from the prior that says why", st, err)
			}
			if diff := cmp.Diff([]string{"model"}, quarantinedTables(t, e)); diff != "" {
				t.Errorf("quarantine (-want +got):\n%s", diff)
			}
		})
	}
}
