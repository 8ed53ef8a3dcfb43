package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
)

// newAbuseHarness is newHarness with tenant "acme", a token to publish
// events, the id of its credential and the server's abuse guard.
func newAbuseHarness(t *testing.T) (h *harness, tok, id string, g *abuseGuard) {
	t.Helper()
	h = newHarness(t)
	h.tenant("acme", false, nil)
	tok = h.token("acme", "eventos:publicar")
	return h, tok, h.db.Credentials("acme")[0].ClientID, h.srv.abuse
}

// TestAbuseEscalationSteps walks every step with an injected clock: a peak
// of 10x the usual rate gives the warning first, persisting anomalies then
// brake, quarantine and suspension, one step per StepInterval; each step is
// recorded with its reason and the operator clears it.
func TestAbuseEscalationSteps(t *testing.T) {
	h, tok, id, g := newAbuseHarness(t)
	at := testStart
	minute := func(n, errs int) {
		for i := 0; i < n; i++ {
			st := 200
			if i < errs {
				st = 422
			}
			g.observe("acme", id, st, at)
		}
		at = at.Add(time.Minute)
	}
	for i := 0; i < 30; i++ { // the usual: 20 requests a minute
		minute(20, 0)
	}
	if g.level(id) != levelNormal {
		t.Fatalf("normal use escalated to %d", g.level(id))
	}
	minute(700, 0) // a peak of 35x
	minute(1, 0)   // closes the peak minute
	if got := g.level(id); got != levelAviso {
		t.Fatalf("after a peak: level %s, want aviso (the warning comes first)", levelNames[got])
	}
	// Anomalies go on (errors), one step per StepInterval.
	var levels []string
	for step := 0; step < 4; step++ {
		at = at.Add(DefaultAbuseConfig().StepInterval)
		minute(200, 150)
		minute(1, 0)
		levels = append(levels, levelNames[g.level(id)])
	}
	if diff := cmp.Diff([]string{"freno", "cuarentena", "suspension", "suspension"}, levels); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
	st := h.srv.AbuseStates("acme")
	if len(st) != 1 || len(st[0].Steps) != 4 || st[0].Steps[0].Level != "aviso" || st[0].Steps[0].Reason == "" {
		t.Fatalf("recorded steps: %+v", st)
	}
	// Suspension: the credential's tokens stop working.
	if c, _ := h.db.Credential(id); !c.Suspended {
		t.Error("credential not suspended")
	}
	if st, _ := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{purchase("q1", "cliente-01", testStart, 1, 1)}}); st != 401 {
		t.Errorf("suspended credential: %d, want 401", st)
	}
	// The operator clears it; the state survives a restart of the guard.
	if _, err := h.srv.ClearAbuse(id, at); err != nil {
		t.Fatal(err)
	}
	if g.level(id) != levelNormal {
		t.Error("clear did not reset the level")
	}
	g2 := newAbuseGuard(DefaultAbuseConfig(), h.db, h.srv.log, nil)
	if got := len(g2.creds[id].state.Steps); got != 5 {
		t.Errorf("steps after reload: %d, want 5 (4 steps and the clearance)", got)
	}
}

// stepToCuarentena signals three anomalies for credential id, one
// StepInterval apart from testStart, and checks that it reached cuarentena.
func stepToCuarentena(t *testing.T, g *abuseGuard, id string) {
	t.Helper()
	at := testStart
	for range 3 {
		g.signal("acme", id, "recarga: prueba", at)
		at = at.Add(DefaultAbuseConfig().StepInterval)
	}
	if g.level(id) != levelCuarentena {
		t.Fatalf("level %s, want cuarentena", levelNames[g.level(id)])
	}
}

func TestAbuseQuarantineAndBrake(t *testing.T) {
	h, tok, id, g := newAbuseHarness(t)
	stepToCuarentena(t, g, id)
	// Brake: the burst is cut to a quarter (40 → 10).
	if g.factor(g.level(id)) != 0.25 {
		t.Errorf("brake factor %v", g.factor(g.level(id)))
	}
	st, body := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{purchase("q1", "cliente-01", testStart, 10, 3)}})
	if st != 200 || body["aceptados"] != 1.0 {
		t.Fatalf("quarantined post: %d %v", st, body)
	}
	// An event whose decision_id is forged is rejected, not held.
	forged := purchase("q2", "cliente-01", testStart, 5, 1)
	forged["decision_id"] = "d_forjada"
	st, body = h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{forged}})
	if rech, _ := body["rechazados"].([]any); st != 200 || body["aceptados"] != 0.0 || len(rech) != 1 || rech[0].(map[string]any)["campo"] != "decision_id" {
		t.Fatalf("quarantined post with a forged decision_id: %d %v", st, body)
	}
	f, _ := h.engine.CustomerFeatures("acme", "cliente-01")
	if v, _ := f.Get("gasto_total_mxn", testStart); v != 0 {
		t.Errorf("quarantined event applied: gasto %v", v)
	}
	if n := h.srv.QuarantineCount("acme"); n != 1 {
		t.Errorf("quarantine holds %d requests, want 1", n)
	}
	acc, _, err := h.srv.QuarantineRelease("acme", testStart)
	if err != nil || acc != 1 {
		t.Fatalf("release: %d %v", acc, err)
	}
	f, _ = h.engine.CustomerFeatures("acme", "cliente-01")
	if v, _ := f.Get("gasto_total_mxn", testStart); v != 10 {
		t.Errorf("after release: gasto %v, want 10", v)
	}
}

// TestAbuseIgnoresServerErrors: the "errores" anomaly is about the
// client's use. Answers the server caused (503 while the operator pauses
// the tenant or the disk is full, 500) never escalate a credential, so a
// client that keeps calling through a pause is not suspended by it; nor do
// requests whose client went away before any answer (499: the client
// library gives up a decision after its 100 ms budget, so a slow server
// would otherwise escalate every credential it keeps waiting); nor do
// 429s, the limits' own answers (a braked client at its usual rate gets
// three of four refused, and would suspend itself); its own errors (422,
// 403) still do.
func TestAbuseIgnoresServerErrors(t *testing.T) {
	got := map[int]string{}
	for _, status := range []int{500, 503, statusClientGone, 403, 422, 429} {
		_, _, id, g := newAbuseHarness(t)
		at := testStart
		for range 4 { // 150 of 200 answers are errors, one step interval apart
			for i := range 200 {
				st := 200
				if i < 150 {
					st = status
				}
				g.observe("acme", id, st, at)
			}
			at = at.Add(time.Minute)
			g.observe("acme", id, 200, at) // closes the minute
			at = at.Add(DefaultAbuseConfig().StepInterval)
		}
		got[status] = levelNames[g.level(id)]
	}
	want := map[int]string{500: "normal", 503: "normal", statusClientGone: "normal", 403: "suspension", 422: "suspension", 429: "normal"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("level after minutes of errors (-want +got):\n%s", diff)
	}
}

// TestAbuseStepIntervalSurvivesRestart: at most one step per StepInterval,
// also across a restart (a new guard over the same store): the guard that
// loads a recent step waits out its interval before the next one.
func TestAbuseStepIntervalSurvivesRestart(t *testing.T) {
	h, _, id, g := newAbuseHarness(t)
	g.signal("acme", id, "recarga: prueba", testStart)
	var got []string
	for _, after := range []time.Duration{time.Minute, DefaultAbuseConfig().StepInterval} {
		g2 := newAbuseGuard(DefaultAbuseConfig(), h.db, h.srv.log, nil)
		g2.signal("acme", id, "recarga: prueba", testStart.Add(after))
		got = append(got, levelNames[g2.level(id)])
	}
	if diff := cmp.Diff([]string{"aviso", "freno"}, got); diff != "" {
		t.Errorf("level after a restart and an anomaly 1 minute, then 10 minutes after the step (-want +got):\n%s", diff)
	}
}

// TestQuarantinedBatchCountsDuplicates: a request held in the abuse
// quarantine answers as any other about its repeated event_ids (contract
// §7): an event_id already processed, or repeated inside the request, with
// the same content counts in duplicados, with other content is rejected
// with duplicado; neither counts as aceptados, and the release applies
// exactly the events the answer accepted.
func TestQuarantinedBatchCountsDuplicates(t *testing.T) {
	h, tok, id, g := newAbuseHarness(t)
	old := purchase("q0", "cliente-01", testStart, 7, 1)
	if st, body := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{old}}); st != 200 || body["aceptados"] != 1.0 {
		t.Fatalf("post before quarantine: %d %v", st, body)
	}
	stepToCuarentena(t, g, id)
	a := purchase("q1", "cliente-01", testStart, 10, 3)
	aChanged := purchase("q1", "cliente-01", testStart, 11, 3)
	oldChanged := purchase("q0", "cliente-01", testStart, 8, 1)
	st, body := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{a, old, a, aChanged, oldChanged}})
	if st != 200 {
		t.Fatalf("quarantined post: %d %v", st, body)
	}
	if got := []any{body["aceptados"], body["duplicados"]}; !cmp.Equal(got, []any{1.0, 2.0}) {
		t.Errorf("aceptados, duplicados = %v, want [1 2]", got)
	}
	want := []rejection{{3, "duplicado", "event_id"}, {4, "duplicado", "event_id"}}
	if diff := cmp.Diff(want, rejections(body)); diff != "" {
		t.Errorf("rechazados (-want +got):\n%s", diff)
	}
	acc, _, err := h.srv.QuarantineRelease("acme", testStart)
	if err != nil || acc != 1 {
		t.Fatalf("release: %d accepted, %v; want 1", acc, err)
	}
	f, _ := h.engine.CustomerFeatures("acme", "cliente-01")
	if v, _ := f.Get("gasto_total_mxn", testStart); v != 17 {
		t.Errorf("after release: gasto %v, want 17", v)
	}
}

// TestIndexHeldEventsOfEarlierRelease: a batch held by a release without
// the held-event index has no entries in it (here: its entries deleted);
// IndexHeldEvents, which serve runs at start, writes them with the hash
// the event's own request would have written, for an event held as
// written (its ts with an offset) too, so that a resend is a duplicate and
// other content duplicado, neither held again, and the release applies the
// event once. Without it both resends were accepted and held (3 batches).
func TestIndexHeldEventsOfEarlierRelease(t *testing.T) {
	h, tok, id, g := newAbuseHarness(t)
	stepToCuarentena(t, g, id)
	plain := purchase("q1", "cliente-01", testStart, 10, 3)
	written := purchase("q2", "cliente-01", testStart, 5, 1)
	written["ts"] = testStart.In(time.FixedZone("", -6*3600)).Format(time.RFC3339) // held as written
	if st, body := postEvents(h, tok, plain, written); st != 200 || body["aceptados"] != 2.0 {
		t.Fatalf("quarantined post: %d %v", st, body)
	}
	b := h.db.NewBatch()
	b.DeleteHeldEvent("acme", "q1")
	b.DeleteHeldEvent("acme", "q2")
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	for _, want := range []map[string]HeldIndexed{{"acme": {Written: 2}}, {}} {
		got, err := h.srv.IndexHeldEvents()
		if diff := cmp.Diff(want, got); err != nil || diff != "" {
			t.Errorf("IndexHeldEvents: %v (-want +got):\n%s", err, diff)
		}
	}
	changed := purchase("q1", "cliente-01", testStart, 11, 3)
	st, body := postEvents(h, tok, written, changed)
	if got := []any{st, body["aceptados"], body["duplicados"]}; !cmp.Equal(got, []any{200, 0.0, 1.0}) {
		t.Errorf("resend: status, aceptados, duplicados = %v, want [200 0 1]", got)
	}
	if diff := cmp.Diff([]rejection{{1, "duplicado", "event_id"}}, rejections(body)); diff != "" {
		t.Errorf("rechazados (-want +got):\n%s", diff)
	}
	if n := h.srv.QuarantineCount("acme"); n != 1 {
		t.Errorf("quarantine holds %d requests, want 1", n)
	}
	if acc, dups, err := h.srv.QuarantineRelease("acme", testStart); err != nil || acc != 2 || dups != 0 {
		t.Errorf("release: %d accepted, %d duplicates, %v; want 2, 0", acc, dups, err)
	}
}

// TestAbuseDamagedStateQuarantined: a stored abuse state that does not
// decode, holds a level outside the steps or names another credential than
// its key is quarantined and reported when a server starts, never loaded:
// that credential starts again at normal, and neither the request path nor
// the listings fail over it.
func TestAbuseDamagedStateQuarantined(t *testing.T) {
	h, _, id, _ := newAbuseHarness(t)
	step := `"steps":[{"at":"2026-11-02T12:00:00Z","level":"aviso","reason":"x"}]`
	damaged := map[string]string{
		"ci_roto":     `{"client_id":"ci_roto","level":`,
		"ci_nivel9":   `{"client_id":"ci_nivel9","level":9,` + step + `}`,
		"ci_negativo": `{"client_id":"ci_negativo","level":-3,` + step + `}`,
		id:            `{"client_id":"ci_de_otro_inquilino","level":2,` + step + `}`,
	}
	for clientID, v := range damaged {
		if err := h.db.PutAbuseState("acme", clientID, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	srv := New(h.srv.Deps) // a restart: the guard loads the stored states
	q, err := h.engine.Quarantine.Quarantined("acme")
	if err != nil || len(q) != len(damaged) {
		t.Fatalf("quarantined %d records (%v), want the %d damaged abuse states", len(q), err, len(damaged))
	}
	if st := srv.AbuseStates("acme"); len(st) != 0 {
		t.Fatalf("loaded damaged states: %+v", st)
	}
	for clientID := range damaged {
		srv.abuse.signal("acme", clientID, "recarga: prueba", testStart)
		if got := srv.abuse.level(clientID); got != levelAviso {
			t.Errorf("%s after one anomaly: level %d, want aviso", clientID, got)
		}
	}
	for _, st := range srv.AbuseStates("acme") {
		if st.LevelName() != "aviso" {
			t.Errorf("%s: level %s, want aviso", st.ClientID, st.LevelName())
		}
	}
}

// TestAbuseStepLogLine: each step is logged as a warning whose JSON has one
// "level" (the severity, "warn") and the step in "step"; the step once went
// in a second "level" key, which log tools read instead of the severity.
func TestAbuseStepLogLine(t *testing.T) {
	h, _, id, _ := newAbuseHarness(t)
	var buf bytes.Buffer
	g := newAbuseGuard(DefaultAbuseConfig(), h.db, zerolog.New(&buf), nil)
	at := testStart
	for range 4 {
		g.signal("acme", id, "recarga: prueba", at)
		at = at.Add(DefaultAbuseConfig().StepInterval)
	}
	type line struct{ Level, Step, Message string }
	var got []line
	for _, raw := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		levels := bytes.Count(raw, []byte(`"level":`))
		var l line
		if err := json.Unmarshal(raw, &l); err != nil || levels != 1 {
			t.Errorf("log line with %d level keys (%v): %s", levels, err, raw)
		}
		got = append(got, l)
	}
	want := []line{
		{"warn", "aviso", "abuse escalation"},
		{"warn", "freno", "abuse escalation"},
		{"warn", "cuarentena", "abuse escalation"},
		{"warn", "suspension", "abuse escalation"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("escalation log lines (-want +got):\n%s", diff)
	}
}

// TestAbuseClearLiftsOrphanSuspension: "admin abuse clear" lifts a
// suspension whose escalation state was lost (a damaged state is set aside
// at start and the guard holds the credential at normal, while the
// credential record stays suspended); it used to answer "not escalated"
// and leave the credential refused for good. A credential neither
// escalated nor suspended still has nothing to clear.
func TestAbuseClearLiftsOrphanSuspension(t *testing.T) {
	for _, tc := range []struct {
		name      string
		suspended bool
		wantErr   error
		wantCode  int // the credential's token on a request after the clear
	}{
		{"suspended, state lost", true, nil, 200},
		{"never escalated", false, ErrNoAbuseState, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, tok, id, _ := newAbuseHarness(t)
			if _, err := h.db.UpdateCredential(id, func(c *store.Credential) error { c.Suspended = tc.suspended; return nil }); err != nil {
				t.Fatal(err)
			}
			srv := New(h.srv.Deps) // a restart: no escalation state is stored
			var listed []string
			for _, st := range srv.AbuseStates("acme") {
				listed = append(listed, st.ClientID+" "+st.LevelName())
			}
			var wantListed []string
			if tc.suspended {
				wantListed = []string{id + " suspension"}
			}
			if diff := cmp.Diff(wantListed, listed); diff != "" {
				t.Errorf("listed before the clear (-want +got):\n%s", diff)
			}
			_, err := srv.ClearAbuse(id, testStart)
			c, _ := h.db.Credential(id)
			got := []any{err, c.Suspended}
			if diff := cmp.Diff([]any{tc.wantErr, false}, got, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("ClearAbuse error, still suspended (-want +got):\n%s", diff)
			}
			if st, _ := h.do("POST", "/v1/eventos", tok, map[string]any{"eventos": []any{purchase("c1", "cliente-01", testStart, 1, 1)}}); st != tc.wantCode {
				t.Errorf("request after the clear: %d, want %d", st, tc.wantCode)
			}
		})
	}
}

// TestAbuseUnconfirmedSends: a day of coupon sends of which more than 90 %
// were never confirmed once their confirmation window (caduca_en, 7 days)
// closed is an anomaly (the warning first); enough confirmations, even
// late ones within the window, too few sends, or one send replayed are
// not. The day is judged once, when a request arrives after the window of
// its last send: an integrator confirming weekly, as the API allows, used
// to be judged after a day and walked up to suspension.
func TestAbuseUnconfirmedSends(t *testing.T) {
	day0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name             string
		sends, confirmed int
		confirmAfter     time.Duration
		sameID           bool
		want             string
	}{
		{"almost none confirmed", 250, 10, time.Hour, false, "aviso"},
		{"most confirmed", 250, 240, time.Hour, false, "normal"},
		{"most confirmed six days later", 250, 240, 6 * 24 * time.Hour, false, "normal"},
		{"too few sends to judge", 150, 0, time.Hour, false, "normal"},
		{"one send replayed", 250, 0, time.Hour, true, "normal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newAbuseGuard(DefaultAbuseConfig(), newHarness(t).db, zerolog.Nop(), nil)
			g.observe("acme", "k1", 200, day0)
			for i := range tc.sends {
				id := fmt.Sprintf("d%d", i)
				if tc.sameID {
					id = "d0"
				}
				g.issued("acme", "k1", id, day0.Add(time.Duration(i)*time.Second))
			}
			// Other credentials' requests run the sweep meanwhile.
			for at := day0.Add(time.Hour); at.Before(day0.Add(tc.confirmAfter)); at = at.Add(12 * time.Hour) {
				g.observe("acme", "k2", 200, at)
			}
			for i := range tc.confirmed {
				g.confirmed("acme", fmt.Sprintf("d%d", i))
			}
			g.observe("acme", "k1", 200, day0.Add(6*24*time.Hour+14*time.Hour)) // the window still open
			if got := levelNames[g.level("k1")]; got != "normal" {
				t.Fatalf("judged before the day's sends could no longer be confirmed: %s", got)
			}
			g.observe("acme", "k2", 200, day0.Add(7*24*time.Hour+15*time.Hour)) // every send's window closed
			if got := levelNames[g.level("k1")]; got != tc.want {
				t.Errorf("level %s, want %s", got, tc.want)
			}
			if len(g.sent) != 0 {
				t.Errorf("%d sends still followed after their day was judged", len(g.sent))
			}
		})
	}
}

// TestAbuseFloodThenSilence: a credential's peak minute followed by
// silence is judged by the sweep that another credential's request runs;
// it used to wait for the flooder's own next request, forever if none came.
func TestAbuseFloodThenSilence(t *testing.T) {
	g := newAbuseGuard(DefaultAbuseConfig(), newHarness(t).db, zerolog.Nop(), nil)
	at := testStart
	for range 30 { // the usual: 20 requests a minute
		for range 20 {
			g.observe("acme", "flood", 200, at)
		}
		at = at.Add(time.Minute)
	}
	for range 700 {
		g.observe("acme", "flood", 200, at)
	}
	g.observe("acme", "quiet", 200, at.Add(2*time.Minute))
	if got := levelNames[g.level("flood")]; got != "aviso" {
		t.Errorf("flooder after silence: %s, want aviso", got)
	}
	if got := levelNames[g.level("quiet")]; got != "normal" {
		t.Errorf("other credential: %s, want normal", got)
	}
}

// TestAbuseFollowsSendsAndConfirmations: the pipeline hands the guard each
// answered coupon send and each confirmation, so a confirmed send stops
// being followed.
func TestAbuseFollowsSendsAndConfirmations(t *testing.T) {
	h, tok := newCatalogHarness(t, 2, func(s *store.Settings) { s.RateLimits = true; s.ControlShare = 0 })
	var sent string
	for i := 0; i < 200 && sent == ""; i++ {
		st, d := h.do("POST", "/v1/decisiones", tok, map[string]any{"cliente_ref": fmt.Sprintf("cliente-%04d", i), "contexto": map[string]any{"canal": "email"}})
		if st != 200 {
			t.Fatalf("decision: %d %v", st, d)
		}
		if d["accion"].(float64) != 0 {
			sent = d["decision_id"].(string)
		}
	}
	if sent == "" {
		t.Fatal("no coupon sent in 200 decisions")
	}
	g := h.srv.abuse
	// state is the send's entry and its day's tally (followed, confirmed
	// flag, sends followed that day, confirmed that day).
	state := func() string {
		g.mu.Lock()
		defer g.mu.Unlock()
		ref, ok := g.sent["acme\x00"+sent]
		n, c := 0, 0
		if u := g.creds[ref.clientID]; u != nil {
			for _, d := range u.sends {
				n, c = n+len(d.keys), c+d.confirmed
			}
		}
		return fmt.Sprintf("followed %v confirmed %v, day: %d sends %d confirmed", ok, ref.confirmed, n, c)
	}
	before := state()
	if st, body := h.do("POST", "/v1/decisiones/"+sent+"/ejecucion", tok, map[string]any{"ejecutada": true}); st != 200 {
		t.Fatalf("confirmation: %d %v", st, body)
	}
	confirmed := state()
	// A replay of the confirmed send (the same id again) is not a new send.
	g.issued("acme", h.db.Credentials("acme")[0].ClientID, sent, testStart)
	want := []string{"followed true confirmed false, day: 1 sends 0 confirmed", "followed true confirmed true, day: 1 sends 1 confirmed", "followed true confirmed true, day: 1 sends 1 confirmed"}
	if diff := cmp.Diff(want, []string{before, confirmed, state()}); diff != "" {
		t.Errorf("the send's state before, after its confirmation, after a replay (-want +got):\n%s", diff)
	}
}

// TestAbusePendingHeldOnce: anomalies signalled between two steps (a
// flood of history reloads within StepInterval) are held as one pending
// reason, the first, which the next step records: the guard's memory of a
// credential does not grow with them (it held one string per signal).
func TestAbusePendingHeldOnce(t *testing.T) {
	h, _, id, _ := newAbuseHarness(t)
	g := newAbuseGuard(DefaultAbuseConfig(), h.db, zerolog.Nop(), nil)
	at := testStart
	g.signal("acme", id, "recarga: primera", at) // aviso at once
	const flood = 1_000_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range flood {
		reason := "recarga: durante el intervalo"
		if i == 0 {
			reason = "recarga: segunda"
		}
		g.signal("acme", id, reason, at.Add(time.Second))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("%d signals within the step interval grew the heap by %d bytes, want it about flat", flood, grew)
	}
	g.signal("acme", id, "recarga: tras el intervalo", at.Add(DefaultAbuseConfig().StepInterval))
	var got []string
	for _, s := range g.creds[id].state.Steps {
		got = append(got, s.Level+" "+s.Reason)
	}
	want := []string{"aviso recarga: primera", "freno recarga: segunda"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// TestAbuseNightlyUploadStaysAtAviso: a caller quiet by day (a few
// requests a minute) that uploads its events each night at the route's
// rate limit reads as a peak every night. The steps wear off after
// CoolDown without one, so five nights hold it at aviso; without that it
// walked up a step a night, to quarantined events by the third and a
// suspended credential by the fourth.
func TestAbuseNightlyUploadStaysAtAviso(t *testing.T) {
	_, _, id, g := newAbuseHarness(t)
	at := testStart
	minute := func(n int) {
		for range n {
			g.observe("acme", id, 200, at)
		}
		at = at.Add(time.Minute)
	}
	var nights []string
	for range 5 {
		for range 60 { // an active hour by day: 5 requests a minute
			minute(5)
		}
		at = at.Add(12 * time.Hour) // quiet until the night
		for range 20 {              // the upload: 20 requests a second
			minute(1200)
		}
		minute(1) // closes the last upload minute
		nights = append(nights, levelNames[g.level(id)])
		at = at.Add(10 * time.Hour)
	}
	if diff := cmp.Diff([]string{"aviso", "aviso", "aviso", "aviso", "aviso"}, nights); diff != "" {
		t.Errorf("level after each night (-want +got):\n%s", diff)
	}
}

// TestAbuseCoolDown: a level below suspension goes down one per CoolDown
// without a step, each recorded with its reason and kept across a
// restart; a suspension stays until the operator clears it.
func TestAbuseCoolDown(t *testing.T) {
	h, _, id, g := newAbuseHarness(t)
	stepToCuarentena(t, g, id)
	cool := DefaultAbuseConfig().CoolDown
	last := testStart.Add(2 * DefaultAbuseConfig().StepInterval) // the third step
	g.observe("acme", id, 200, last.Add(cool-time.Minute))
	if got := levelNames[g.level(id)]; got != "cuarentena" {
		t.Fatalf("before CoolDown: %s, want cuarentena", got)
	}
	g.observe("acme", id, 200, last.Add(cool+time.Minute))
	if got := levelNames[g.level(id)]; got != "freno" {
		t.Fatalf("after CoolDown: %s, want freno", got)
	}
	g.observe("acme", id, 200, last.Add(3*cool+2*time.Minute)) // two more CoolDowns at once
	st := h.srv.AbuseStates("acme")
	if len(st) != 1 || st[0].Level != levelNormal {
		t.Fatalf("after three CoolDowns: %+v, want normal", st)
	}
	steps := st[0].Steps[3:]
	want := []AbuseStep{
		{At: last.Add(cool + time.Minute).UTC(), Level: "freno", Reason: "sin anomalías en 6 h"},
		{At: last.Add(3*cool + 2*time.Minute).UTC(), Level: "normal", Reason: "sin anomalías en 6 h"},
	}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("recorded steps down (-want +got):\n%s", diff)
	}
	g2 := newAbuseGuard(DefaultAbuseConfig(), h.db, h.srv.log, nil)
	if got := g2.creds[id].state; got.Level != levelNormal || len(got.Steps) != 5 {
		t.Errorf("after reload: level %d, %d steps; want normal, 5", got.Level, len(got.Steps))
	}

	at := last.Add(4 * cool)
	for range 4 {
		g.signal("acme", id, "recarga: prueba", at)
		at = at.Add(DefaultAbuseConfig().StepInterval)
	}
	g.observe("acme", id, 200, at.Add(10*cool))
	if got := levelNames[g.level(id)]; got != "suspension" {
		t.Errorf("a suspension after 10 CoolDowns: %s, want suspension (the operator clears it)", got)
	}
}

// TestAbuseAfterTheClockWentBack: once the clock went back a day, a level
// goes down after a CoolDown from then, and the next step up comes a
// StepInterval after that, not a day later: they were measured from a last
// step stamped a day ahead.
func TestAbuseAfterTheClockWentBack(t *testing.T) {
	_, _, id, g := newAbuseHarness(t)
	stepToCuarentena(t, g, id)
	cfg := DefaultAbuseConfig()
	back := testStart.Add(2*cfg.StepInterval - 24*time.Hour) // the third step's time, a day back
	g.observe("acme", id, 200, back)
	g.observe("acme", id, 200, back.Add(cfg.CoolDown+time.Minute))
	if got := levelNames[g.level(id)]; got != "freno" {
		t.Errorf("a CoolDown after the clock went back a day: %s, want freno", got)
	}
	at := back.Add(cfg.CoolDown + 2*time.Minute)
	g.signal("acme", id, "recarga: prueba", at)
	g.signal("acme", id, "recarga: prueba", at.Add(cfg.StepInterval))
	if got := levelNames[g.level(id)]; got != "cuarentena" {
		t.Errorf("an anomaly a StepInterval after the step down: %s, want cuarentena", got)
	}
}

// TestAbuseReloadIsMoreThanAResend: one resend of events whose requests
// were answered (a retry whose answer was lost, or the client library's
// recovery after a failed request) is no history reload: the credential
// stays normal. Each request of 500 or more events almost all duplicates
// was one, a step toward the quarantine of the client's events. Requests
// that bring a minute's duplicates to MinReload (the same 1,000 events
// sent a second time again: repeated) are one: aviso.
func TestAbuseReloadIsMoreThanAResend(t *testing.T) {
	h, tok, id, g := newAbuseHarness(t)
	evs := make([]map[string]any, 1000)
	for i := range evs {
		evs[i] = map[string]any{"event_id": fmt.Sprintf("recarga-%d", i), "cliente_ref": "cliente-0001", "ts": testStart.Format(time.RFC3339),
			"tipo": "COMPRA_CAT", "clave": "abarrotes", "valor": 1, "extra": map[string]any{"ticket_id": fmt.Sprintf("t-%d", i), "margen": 1}}
	}
	body := map[string]any{"eventos": evs}
	post := func(wantDups float64) {
		t.Helper()
		st, res := h.do("POST", "/v1/eventos", tok, body)
		if st != 200 || res["duplicados"] != wantDups {
			t.Fatalf("POST /v1/eventos: %d %v, want 200 with %v duplicates", st, res, wantDups)
		}
	}
	post(0)
	post(1000) // the slice sent again, once
	if lv := g.level(id); lv != levelNormal {
		t.Fatalf("after one resend of 1,000 events: level %s, want normal", levelNames[lv])
	}
	for range DefaultAbuseConfig().MinReload/1000 - 1 {
		post(1000)
	}
	if lv := g.level(id); lv != levelAviso {
		t.Fatalf("after %d duplicate events in a minute: level %s, want aviso", DefaultAbuseConfig().MinReload, levelNames[lv])
	}
}
