package server

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/internal/apitest"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// TestAPIModel drives the v1 API with random sequences of valid and
// slightly invalid requests over two sandbox tenants and a few customers,
// and checks every answer against a reference model of what the spec and
// the contract promise (modelState): which event_ids are accepted or
// duplicates, which decisions exist and their state, the reward window,
// the per-customer daily cap, idempotent replays, deletion and what the
// export holds, tenant isolation, status codes and error bodies. A failure
// prints the seed and the steps so far; rerun one seed with
// -model.seed=N -model.seeds=1 (and the same -model.steps).
//
// Flags: -model.steps (default 300 with -short, 1500 without),
// -model.seeds (default 1), -model.seed (first seed, default 1),
// -model.burst (percent of extra steps that send requests at once; with
// -race, for races).
func TestAPIModel(t *testing.T) {
	steps := *modelSteps
	if steps == 0 {
		steps = 1500
		if testing.Short() {
			steps = 300
		}
	}
	for seed := *modelSeed; seed < *modelSeed+uint64(*modelSeeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runModel(t, seed, steps)
		})
	}
}

var (
	modelSteps = flag.Int("model.steps", 0, "steps of TestAPIModel per seed (0: 300 with -short, else 1500)")
	modelSeeds = flag.Int("model.seeds", 1, "number of seeds TestAPIModel runs")
	modelSeed  = flag.Uint64("model.seed", 1, "first seed of TestAPIModel")
	modelBurst = flag.Int("model.burst", 0, "percent of TestAPIModel's steps that send requests at once, beyond the usual 2")
)

// The model's tenants: "acme" runs without rate limits (no per-customer
// daily cap), "beta" with them (the cap of 3 decisions per customer per day
// applies). Both are sandbox tenants, so their clocks move only when the
// test moves them.
var modelTenants = []string{"acme", "beta"}

// modelKeys are the Idempotency-Keys both tenants draw from: the same key
// in two tenants is two keys.
var modelKeys = []string{"k-1", "k-2", "k-3", "k-4", "k-5", "k-6"}

// modelRun is one seeded run: the server under test, the model, the
// random source and the steps taken so far (printed on a failure).
type modelRun struct {
	t        *testing.T
	h        *harness
	fs       storefs.FS // the store's file system, kept across restarts
	restarts uint64
	rnd      *rand.Rand
	seed     uint64
	m        map[string]*modelTenant
	tokens   map[string]string
	issued   time.Time // real time the tokens were issued
	log      []string
	seq      int            // counter for fresh ids
	seen     map[string]int // answers by what was expected of them (logged with -v)
	paused   bool           // a tenant is paused: 503 is its answer
}

// modelTenant is what the model holds for one tenant.
type modelTenant struct {
	id        string
	now       time.Time
	capped    bool           // the per-customer daily cap applies
	shadow    bool           // shadow mode
	quota     map[string]int // daily quota by kind (engine.QuotaDecisions, engine.QuotaEvents); 0: none
	quotaUsed map[string]int // used by quotaDay
	batchAt   *time.Time     // when the last batch job was created
	// The reward window and its grace: acme has the defaults (28 and 2
	// days), beta a window shorter than the confirmation deadline, so
	// that rewards become final while decisions can still be confirmed.
	rewardWindow, rewardGrace time.Duration
	refs                      []string
	events                    map[string]modelEvent // accepted events by event_id
	decisions                 map[string]*modelDecision
	order                     []string          // decision ids in creation order
	erasedIDs                 []string          // ids of decisions a deletion erased
	window                    map[string]string // cliente_ref → last decision id
	dayCount                  map[string]int    // cliente_ref NUL day → decisions answered
	keys                      map[string]*modelKey
	deletion                  map[string]string // cliente_ref → programado | completado
	catalog                   []int             // action ids of the catalog
	held                      int               // ids 1 to held: every coupon a catalog held (tipo_cupon T<id>)
	eligible                  map[int]bool      // the actions a push decision may choose
	version                   int64
	campaigns                 map[string]modelCampaign
	fallbacks                 []modelFallback
}

type modelEvent struct {
	ref  string
	body map[string]any
}

type modelDecision struct {
	id       string
	ref      string
	at       time.Time
	caducaEn time.Time
	accion   int
	estado   string // pendiente, ejecutada, modificada, rechazada
	conf     *modelConf
	campaign string
	reward   *int64 // cents, made final by a learner pass
	sombra   bool   // made in shadow mode
}

// modelCampaign is a campaign the probes define: its creado_en and
// actualizado_en (RFC 3339, the tenant clock).
type modelCampaign struct{ creado, actualizado string }

// modelFallback is a fallback record (POST /v1/decisiones/respaldo); the
// export shows it ejecutada (the caller applied its rule).
type modelFallback struct {
	ref    string
	accion int
}

type modelConf struct {
	at         time.Time // confirmada_en, the tenant clock
	ts         string    // ts_ejecucion in UTC, "" for none
	estado     string
	accionReal *int
	motivo     *string
}

// modelKey is an Idempotency-Key's record: the request it answered
// (route and canonical body), its answer and when.
type modelKey struct {
	ident  string
	route  string         // decisiones, ejecucion or respaldo
	id     string         // the decision a confirmation named
	req    map[string]any // the request body
	ref    string
	at     time.Time
	answer map[string]any
}

func runModel(t *testing.T, seed uint64, steps int) {
	r := newModelRun(t, seed)
	for i := 0; i < steps; i++ {
		r.h.clock.Advance(time.Second) // real time: keeps every rate limit far off
		if r.h.clock.Now().Sub(r.issued) > 10*time.Minute {
			r.issueTokens()
		}
		r.step(i)
	}
	// A last export of every customer checks what the steps left.
	for _, tn := range modelTenants {
		for _, ref := range r.m[tn].refs {
			r.export(tn, ref)
		}
	}
	var seen []string
	for _, k := range sortedKeys(r.seen) {
		seen = append(seen, fmt.Sprintf("%s: %d", k, r.seen[k]))
	}
	t.Logf("seed %d, %d steps; answers: %s", seed, steps, strings.Join(seen, ", "))
}

func newModelRun(t *testing.T, seed uint64) *modelRun {
	fs := storefs.Mem()
	h := newHarnessOn(t, fs)
	r := &modelRun{t: t, h: h, fs: fs, rnd: rand.New(rand.NewPCG(seed, 0x5eed)), seed: seed, m: map[string]*modelTenant{}, seen: map[string]int{}}
	for i, tn := range modelTenants {
		capped := i == 1
		quota := map[string]int{}
		if capped {
			quota = map[string]int{engine.QuotaDecisions: betaQuotaDecisions, engine.QuotaEvents: betaQuotaEvents}
		}
		window, grace := 28*24*time.Hour, 2*24*time.Hour
		if capped {
			window, grace = 3*24*time.Hour, 24*time.Hour
		}
		h.tenant(tn, true, func(s *store.Settings) {
			s.RateLimits = capped
			s.RewardWindow, s.RewardGrace = window, grace
			s.QuotaDecisionsDay, s.QuotaEventsDay = int64(quota[engine.QuotaDecisions]), int64(quota[engine.QuotaEvents])
		})
		r.m[tn] = &modelTenant{
			id: tn, now: testStart, capped: capped,
			// "shared-0001" exists in both tenants: its data must never cross.
			refs:         []string{tn + "-cli-0001", tn + "-cli-0002", tn + "-cli-0003", "shared-0001"},
			events:       map[string]modelEvent{},
			decisions:    map[string]*modelDecision{},
			window:       map[string]string{},
			dayCount:     map[string]int{},
			keys:         map[string]*modelKey{},
			deletion:     map[string]string{},
			campaigns:    map[string]modelCampaign{},
			quota:        quota,
			quotaUsed:    map[string]int{},
			rewardWindow: window, rewardGrace: grace,
		}
	}
	r.issueTokens()
	for _, tn := range modelTenants {
		r.putCatalog(tn, 3)
		r.defineBudget(tn)
	}
	return r
}

func (r *modelRun) issueTokens() {
	r.tokens = map[string]string{}
	for _, tn := range modelTenants {
		r.tokens[tn] = r.h.token(tn, allScopes...)
		r.tokens[tn+"/eventos"] = r.h.token(tn, "eventos:publicar") // a credential with one scope
	}
	r.issued = r.h.clock.Now()
}

// fail stops the run with the seed, the steps so far and what went wrong.
func (r *modelRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("seed %d, step %d: %s\nsteps:\n  %s", r.seed, len(r.log)-1, fmt.Sprintf(format, args...), strings.Join(r.log, "\n  "))
}

func (r *modelRun) note(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf("%d: ", len(r.log))+fmt.Sprintf(format, args...))
}

func (r *modelRun) fresh(prefix string) string {
	r.seq++
	return fmt.Sprintf("%s-%d", prefix, r.seq)
}

func (r *modelRun) pick(n int) int { return r.rnd.IntN(n) }

func (r *modelRun) tenant() *modelTenant { return r.m[modelTenants[r.pick(len(modelTenants))]] }

// ref is one of mt's customers, the first one more often than the others
// (so that its daily cap is reached).
func (r *modelRun) ref(mt *modelTenant) string {
	if r.pick(3) == 0 {
		return mt.refs[0]
	}
	return mt.refs[r.pick(len(mt.refs))]
}

// step takes one random operation.
func (r *modelRun) step(i int) {
	r.t.Helper()
	mt := r.tenant()
	if *modelBurst > 0 && r.pick(100) < *modelBurst {
		r.burst(mt)
		return
	}
	switch n := r.pick(100); {
	case n < 25:
		r.events(mt)
	case n < 46:
		r.decide(mt)
	case n < 50:
		r.fallback(mt)
	case n < 68:
		r.confirm(mt)
	case n < 75:
		r.advance(mt)
	case n < 76:
		r.shadow(mt)
	case n < 81:
		r.deleteCliente(mt, r.ref(mt))
	case n < 84:
		r.deletionPass()
	case n < 92:
		r.export(mt.id, r.ref(mt))
	case n < 94:
		r.catalogStep(mt)
	case n < 95:
		r.restart()
	case n < 96:
		r.learn(mt)
	case n < 97:
		r.prune(mt)
	case n < 98:
		r.batchJob()
	case n < 99:
		r.burst(mt)
	default:
		r.probe(mt)
	}
}

// answer is one HTTP answer: status, headers, JSON object body.
type modelAnswer struct {
	status int
	header http.Header
	body   map[string]any
}

// call sends a request as tenant's token and checks what every answer
// must be: never a 5xx, X-Trace-Id set, error bodies of the contract's
// shape (ErrorV1 with the trace id, or HTTPValidationError for 422).
func (r *modelRun) call(tenant, method, path string, body any, hdr ...string) modelAnswer {
	r.t.Helper()
	resp := r.h.raw(method, path, r.tokens[tenant], body, hdr...)
	a := modelAnswer{status: resp.StatusCode, header: resp.Header, body: apitest.Object(r.t, resp)}
	r.checkAnswer(method, path, a)
	return a
}

// checkAnswer checks what every answer must be (see call).
func (r *modelRun) checkAnswer(method, path string, a modelAnswer) {
	r.t.Helper()
	trace := a.header.Get("X-Trace-Id")
	switch {
	case a.status >= 500 && !(a.status == 503 && r.paused):
		r.fail("%s %s: %d %v", method, path, a.status, a.body)
	case trace == "":
		r.fail("%s %s: no X-Trace-Id", method, path)
	case a.status == 422:
		r.checkValidation(method, path, a)
	case a.status >= 400:
		r.checkError(method, path, a, trace)
	}
}

// modelErrorCodes is the closed set of codes by HTTP status (contract §2).
var modelErrorCodes = map[int][]string{
	401: {"no_autenticado"}, 403: {"sin_permiso"}, 404: {"no_encontrado"},
	409: {"ejecucion_ya_confirmada", "decision_caducada", "idempotencia_conflicto"},
	413: {"esquema_invalido"}, 415: {"esquema_invalido"}, 429: {"limite_excedido"}, 503: {"inquilino_pausado"},
}

func (r *modelRun) checkError(method, path string, a modelAnswer, trace string) {
	r.t.Helper()
	codigo, _ := a.body["codigo"].(string)
	mensaje, _ := a.body["mensaje"].(string)
	if !slices.Contains(modelErrorCodes[a.status], codigo) || mensaje == "" || len([]rune(mensaje)) > 512 || a.body["trace_id"] != trace {
		r.fail("%s %s: error body %d %v (trace %s)", method, path, a.status, a.body, trace)
	}
	for k := range a.body {
		if !slices.Contains([]string{"codigo", "mensaje", "campo", "detalle", "trace_id"}, k) {
			r.fail("%s %s: error body member %q: %v", method, path, k, a.body)
		}
	}
	if a.status == 429 || a.status == 503 {
		if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s < 1 {
			r.fail("%s %s: %d Retry-After %q", method, path, a.status, a.header.Get("Retry-After"))
		}
	}
}

func (r *modelRun) checkValidation(method, path string, a modelAnswer) {
	r.t.Helper()
	items, ok := a.body["detail"].([]any)
	if !ok || len(items) == 0 {
		r.fail("%s %s: 422 body %v", method, path, a.body)
	}
	for _, it := range items {
		m, _ := it.(map[string]any)
		loc, _ := m["loc"].([]any)
		if len(loc) == 0 || m["msg"] == nil || m["type"] == nil {
			r.fail("%s %s: 422 item %v", method, path, it)
		}
	}
}

// expectError fails unless a is status with codigo.
func (r *modelRun) expectError(what string, a modelAnswer, status int, codigo string) {
	r.t.Helper()
	if a.status != status || (codigo != "" && a.body["codigo"] != codigo) {
		r.fail("%s: got %d %v, want %d %s", what, a.status, a.body, status, codigo)
	}
	r.seen[what]++
}

// advance moves a tenant's sandbox clock ("admin clock advance"). The
// steps include the contract's boundaries: 7 days (caduca_en), 28 days
// (acme's reward window), 3 and 4 days (beta's window, and its grace).
func (r *modelRun) advance(mt *modelTenant) {
	r.t.Helper()
	by := []time.Duration{time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 28 * 24 * time.Hour, 13 * time.Hour,
		3 * 24 * time.Hour, 4 * 24 * time.Hour}[r.pick(9)]
	r.note("advance %s by %s", mt.id, by)
	if _, err := r.h.db.UpdateTenant(mt.id, func(t *store.Tenant) error { t.ClockNow = t.ClockNow.Add(by); return nil }); err != nil {
		r.fail("advance: %v", err)
	}
	mt.now = mt.now.Add(by)
}

// deletionPass runs the deletion worker once: every scheduled deletion of
// both tenants completes and erases what names the customer.
func (r *modelRun) deletionPass() {
	r.t.Helper()
	r.note("deletion pass")
	want := r.scheduled()
	stats, err := r.h.srv.Privacy.ProcessDeletions(context.Background(), privacy.DeletionHooks{})
	if err != nil || stats.Completed != want || stats.Failed != 0 {
		r.fail("deletion pass: %+v %v, want %d completed", stats, err, want)
	}
	r.eraseScheduled()
}

// erase drops from the model everything that names ref.
func (mt *modelTenant) erase(ref string) {
	for id, ev := range mt.events {
		if ev.ref == ref {
			delete(mt.events, id)
		}
	}
	for id, d := range mt.decisions {
		if d.ref == ref {
			delete(mt.decisions, id)
			mt.erasedIDs = append(mt.erasedIDs, id)
		}
	}
	slices.Sort(mt.erasedIDs)
	mt.order = slices.DeleteFunc(mt.order, func(id string) bool { return mt.decisions[id] == nil })
	mt.fallbacks = slices.DeleteFunc(mt.fallbacks, func(f modelFallback) bool { return f.ref == ref })
	delete(mt.window, ref)
	for k := range mt.dayCount {
		if strings.HasPrefix(k, ref+"\x00") {
			delete(mt.dayCount, k)
		}
	}
	for k, rec := range mt.keys {
		if rec.ref == ref {
			delete(mt.keys, k)
		}
	}
}

func (r *modelRun) deleteCliente(mt *modelTenant, ref string) {
	r.t.Helper()
	r.note("delete %s %s", mt.id, ref)
	a := r.call(mt.id, "DELETE", "/v1/clientes/"+ref, nil)
	want := map[string]any{"cliente_ref": ref, "estado": "programado"}
	if a.status != 202 || !cmp.Equal(a.body, want) {
		r.fail("delete: %d %v", a.status, a.body)
	}
	mt.deletion[ref] = privacy.DeletionScheduled
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// canon is v's JSON with keys in order (encoding/json sorts map keys).
func canon(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// restart stops the server and closes the store, then serves the same
// store again with a new engine and server (what a process restart keeps
// is what the store holds), the real clock where it was.
func (r *modelRun) restart() {
	r.t.Helper()
	r.note("restart")
	old := r.h
	old.http.Close()
	if err := old.srv.Flush(); err != nil { // as serve does when it stops
		r.fail("flush: %v", err)
	}
	if err := old.db.Close(); err != nil {
		r.fail("close: %v", err)
	}
	old.closed = true
	// A process draws its engine's seed (serve gives none); a test's fixed
	// seed drawn again would issue again the ids of decisions a deletion
	// erased (a live decision's id is never issued twice: freshNonce).
	r.restarts++
	r.h = newHarnessSeeded(r.t, r.fs, 42+r.restarts, zerolog.Nop(), HTTPConfig{}, nil, nil)
	r.h.clock.Advance(old.clock.Now().Sub(r.h.clock.Now()))
	r.issueTokens()
}

// Reward constants of the model's tenants and catalogs (contract §5).
const (
	modelSendCents   = 50   // costo_envio_mxn of every action of putCatalog
	modelOptoutCents = 5000 // the default opt-out penalty
)

// learn runs a learner pass for mt: every reward whose window and grace
// have passed becomes final, the margin of the customer's purchases with
// ts in the window, minus the sending cost if something was sent, minus
// the opt-out penalty if a BAJA comunicaciones fell in it (contract §5).
func (r *modelRun) learn(mt *modelTenant) {
	r.t.Helper()
	r.note("learn %s", mt.id)
	if _, err := r.h.engine.Learner.Learn(mt.id); err != nil {
		r.fail("learn: %v", err)
	}
	for _, d := range mt.decisions {
		if d.reward == nil && !mt.now.Before(d.at.Add(mt.rewardWindow+mt.rewardGrace)) {
			w := mt.windowReward(d)
			d.reward = &w
		}
	}
}

// windowReward is d's reward by the events the model holds now.
func (mt *modelTenant) windowReward(d *modelDecision) int64 {
	var cents int64
	optout := false
	for _, ev := range mt.events {
		b := ev.body
		ts, _ := time.Parse(time.RFC3339, b["ts"].(string))
		if ev.ref != d.ref || ts.Before(d.at) || !ts.Before(d.at.Add(mt.rewardWindow)) {
			continue
		}
		switch b["tipo"] {
		case "COMPRA_CAT":
			cents += int64(math.Round(b["extra"].(map[string]any)["margen"].(float64) * 100))
		case "BAJA":
			optout = optout || b["clave"] == "comunicaciones"
		}
	}
	sent := d.accion
	if d.conf != nil && d.conf.estado == "rechazada" {
		sent = 0
	}
	if d.conf != nil && d.conf.estado == "modificada" {
		sent = *d.conf.accionReal
	}
	if sent != 0 {
		cents -= modelSendCents
	}
	if optout {
		cents -= modelOptoutCents
	}
	return cents
}

// prune deletes mt's expired Idempotency-Key records (the learner loop's
// PruneIdempotency): those the model holds past their retention, no more.
func (r *modelRun) prune(mt *modelTenant) {
	r.t.Helper()
	r.note("prune keys %s", mt.id)
	var want []string
	for _, k := range sortedKeys(mt.keys) {
		if mt.liveKey(k) == nil {
			want = append(want, k)
		}
	}
	n, err := r.h.engine.PruneIdempotency(mt.id)
	if err != nil || n != len(want) {
		r.fail("prune: %d %v, want %d (%v)", n, err, len(want), want)
	}
	for _, k := range want {
		delete(mt.keys, k)
	}
}
