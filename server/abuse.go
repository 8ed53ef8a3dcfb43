package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// Abuse escalation (spec, Limits): per credential, anomalous use moves it
// up one step at a time, each step recorded with its reason, the warning
// always first:
//
//	0 normal
//	1 aviso        warning in "admin tenant show" and the logs; nothing else changes
//	2 freno        rate limits cut to AbuseConfig.BrakeFactor of normal
//	3 cuarentena   new events are accepted and kept but not applied until
//	               the operator releases them ("admin abuse release")
//	4 suspension   the credential is suspended: 401 until the operator clears it
//
// A step is taken when an anomaly is seen and the previous step is at least
// StepInterval old; of the anomalies seen meanwhile only the first is held,
// the reason that step records, so a flood of them costs no memory.
// Anomalies, measured per minute of real time:
//
//	pico      requests in a minute > PeakFactor × the usual per-minute rate
//	          (an EWMA), and at least MinPeak
//	errores   client error answers (4xx) > ErrorRatio of at least MinRequests
//	          requests; 5xx are the server's doing (a pause, a full disk, a
//	          fault), not anomalous use, and never count; nor does a 499,
//	          a request whose client went away before any answer (a client
//	          library that gave up on a slow server), nor a 429: the limits
//	          already refused the excess, and under the brake a client at
//	          its usual rate gets three of four requests refused, so
//	          counting them would walk it up to suspension by itself
//	          (a flood shows as a pico, refused requests included)
//	recarga   history reloaded: at least MinReload events already processed,
//	          sent in one minute in requests of at least 500 events almost
//	          all duplicates (reload). One such request is not a reload: the
//	          client library's documented recovery (PublishEvents) sends the
//	          same slice again, and a retry whose first answer was lost is
//	          all duplicates; each walked a client one step toward the
//	          quarantine of its events.
//
// and, per UTC day of real time, judged once the day's last decision can
// no longer be confirmed (its caduca_en, engine.DecisionTTL, has passed;
// so at most one step a day from it):
//
//	sin confirmar  more than UnconfirmedRatio of at least UnconfirmedMin
//	               coupon sends (online decisions with accion ≠ 0, not
//	               fallback) that the credential got were never confirmed,
//	               by any credential of the tenant. At most
//	               UnconfirmedSample sends a day are followed, the first
//	               ones; the tally is kept in memory and starts again at a
//	               restart.
//
// A minute is closed when the credential's next request arrives in a later
// minute, or by the sweep that any request runs once a minute, so a flood
// followed by silence is judged as well.
//
// Steps below suspension wear off: a credential that took no step for
// CoolDown (so saw no anomaly for most of it: a pending one steps within
// StepInterval) goes down one level, a step recorded with its reason, and
// one more for each further CoolDown without one. A pattern that is normal
// for a caller but reads as an anomaly each time, such as a nightly upload
// at the rate limit after a quiet day (a peak every night: the usual rate
// is an EWMA of the minutes it was active), then holds it at aviso instead
// of walking it up a step a night to suspension. Suspension does not wear
// off: the operator clears it.
//
// The operator clears a credential with "admin abuse clear CLIENT_ID".
type AbuseConfig struct {
	PeakFactor        float64
	MinPeak           int
	MinReload         int // duplicate events in a minute that make a reload (recarga): 2,000, twice the most one request holds
	ErrorRatio        float64
	MinRequests       int
	UnconfirmedRatio  float64
	UnconfirmedMin    int
	UnconfirmedSample int
	StepInterval      time.Duration
	CoolDown          time.Duration // without a step for this long, a level below suspension goes down one
	BrakeFactor       float64
}

// DefaultAbuseConfig are the documented thresholds.
func DefaultAbuseConfig() AbuseConfig {
	return AbuseConfig{PeakFactor: 10, MinPeak: 600, MinReload: 2_000, ErrorRatio: 0.5, MinRequests: 100,
		UnconfirmedRatio: 0.9, UnconfirmedMin: 200, UnconfirmedSample: 2000,
		StepInterval: 10 * time.Minute, CoolDown: 6 * time.Hour, BrakeFactor: 0.25}
}

// Abuse levels.
const (
	levelNormal = iota
	levelAviso
	levelFreno
	levelCuarentena
	levelSuspension
)

var levelNames = []string{"normal", "aviso", "freno", "cuarentena", "suspension"}

// AbuseStep is one recorded escalation step.
type AbuseStep struct {
	At     time.Time `json:"at"`
	Level  string    `json:"level"`
	Reason string    `json:"reason"`
}

// AbuseState is a credential's escalation state (TableAbuse).
type AbuseState struct {
	ClientID string      `json:"client_id"`
	Level    int         `json:"level"`
	Steps    []AbuseStep `json:"steps"`
}

// LevelName is the state's level as a word.
func (s *AbuseState) LevelName() string { return levelNames[s.Level] }

type credUse struct {
	tenant string
	minute int64
	count  int
	errors int
	usual  float64 // EWMA of requests per minute
	seen   int     // minutes observed
	// pending is the first anomaly seen since the last step, the reason
	// the next step records ("": none); later ones before that step add
	// nothing (a flood of them held one string each until the step).
	pending string
	// reloaded is the duplicate events of mostly-duplicate requests in
	// minute reloadMinute (reload).
	reloaded     int
	reloadMinute int64
	state        AbuseState
	lastStep     time.Time
	sends        []sendDay // oldest first
}

// flag records the anomaly reason unless one is pending already (pending).
func (u *credUse) flag(reason string) {
	if u.pending == "" {
		u.pending = reason
	}
}

// sendDay is the coupon sends a credential got in one UTC day of real time
// that the unconfirmed trigger follows (keys of abuseGuard.sent), and how
// many of them were confirmed.
type sendDay struct {
	day       int64 // Unix seconds / 86400
	keys      []string
	confirmed int
}

// sentRef is who got a followed send, and on which day.
type sentRef struct {
	clientID  string
	day       int64
	confirmed bool // kept until judged: a replay of it is not a new send
}

// abuseGuard holds the escalation of every credential in memory, under
// mu, which every authenticated request takes: nothing under it waits for
// the disk. A change of a credential's level applies in memory at once
// and queues its state in writes; the call that made it releases mu and
// then stores the queue (flush), under writeMu, in the order the changes
// were made, so the store ends with the state held in memory and never
// an earlier one written over a later one. Lock order: writeMu, then mu.
type abuseGuard struct {
	cfg       AbuseConfig
	db        *store.DB
	log       zerolog.Logger
	mu        sync.Mutex
	creds     map[string]*credUse
	sent      map[string]sentRef        // tenant + "\x00" + decision_id, until confirmed or judged
	lastSweep int64                     // minute (Unix seconds / 60) of the last sweep
	writes    []abuseWrite              // under mu: changes not yet taken to the store, oldest first
	writeMu   sync.Mutex                // held while storing writes taken from the queue
	onStep    func(tenant, step string) // metrics; may be nil
}

// credFlag is what a write does to the credential's stored Suspended flag.
type credFlag int

const (
	flagKept    credFlag = iota
	flagSuspend          // set after the state, even when its write failed: the credential stays refused
	flagLift             // cleared once the state is stored, not when its write failed
)

// abuseWrite is one change of a credential's escalation to store: a copy
// of its state as the change left it, and what it does to the
// credential's Suspended flag.
type abuseWrite struct {
	tenant string
	state  AbuseState
	flag   credFlag
}

// quarantineFunc moves a damaged record of tenant to quarantine and
// reports it (engine.Records.Quarantine).
type quarantineFunc func(tenant string, key, v []byte, cause error) error

// newAbuseGuard loads the stored escalation states. One that does not
// decode, holds a level outside the steps or names another credential than
// its key is handed to quarantine (nil: only logged) and not loaded: that
// credential starts again at normal.
func newAbuseGuard(cfg AbuseConfig, db *store.DB, log zerolog.Logger, quarantine quarantineFunc) *abuseGuard {
	g := &abuseGuard{cfg: cfg, db: db, log: log, creds: map[string]*credUse{}, sent: map[string]sentRef{}}
	type bad struct {
		key, v []byte
		err    error
	}
	for _, t := range db.Tenants() {
		var damaged []bad
		db.ScanAbuseStates(t.ID, func(k, v []byte) error {
			st, err := decodeAbuseState(t.ID, k, v)
			if err != nil {
				damaged = append(damaged, bad{bytes.Clone(k), bytes.Clone(v), err})
				return nil
			}
			g.creds[st.ClientID] = &credUse{tenant: t.ID, state: st, minute: -1, lastStep: lastStepAt(st)}
			return nil
		})
		for _, d := range damaged {
			log.Warn().Str("tenant", t.ID).Str("error", d.err.Error()).Msg("damaged abuse state: not loaded")
			if quarantine == nil {
				continue
			}
			if err := quarantine(t.ID, d.key, d.v, d.err); err != nil {
				log.Error().Err(err).Str("tenant", t.ID).Msg("quarantine of a damaged abuse state")
			}
		}
	}
	return g
}

// decodeAbuseState decodes the abuse state stored at key of tenant and
// checks that its level is one of the steps and that it is the state of
// the credential its key names.
func decodeAbuseState(tenant string, key, v []byte) (AbuseState, error) {
	var st AbuseState
	if err := json.Unmarshal(v, &st); err != nil {
		return st, fmt.Errorf("abuse state: %w", err)
	}
	if st.Level < levelNormal || st.Level > levelSuspension {
		return st, fmt.Errorf("abuse state: level %d is not a step", st.Level)
	}
	if !bytes.Equal(key, store.AbuseKey(tenant, st.ClientID)) {
		return st, errors.New("abuse state: client_id is not its key's")
	}
	return st, nil
}

// lastStepAt is when a loaded state took its last step up (zero when it is
// normal: a clearance waits for nothing), so that a restart keeps the
// StepInterval between steps.
func lastStepAt(st AbuseState) time.Time {
	if st.Level == levelNormal || len(st.Steps) == 0 {
		return time.Time{}
	}
	return st.Steps[len(st.Steps)-1].At
}

func (g *abuseGuard) use(tenant, clientID string) *credUse {
	u := g.creds[clientID]
	if u == nil {
		u = &credUse{tenant: tenant, minute: -1, state: AbuseState{ClientID: clientID}}
		g.creds[clientID] = u
	}
	return u
}

// queue records u's state as it now is, to be stored with flag by the
// flush that follows; g.mu is held.
func (g *abuseGuard) queue(u *credUse, flag credFlag) {
	st := u.state
	st.Steps = slices.Clone(st.Steps)
	g.writes = append(g.writes, abuseWrite{tenant: u.tenant, state: st, flag: flag})
}

// unlock releases g.mu, which the caller took when n writes were queued,
// and, if the caller queued more meanwhile, stores them (flush) before
// returning.
func (g *abuseGuard) unlock(n int) {
	queued := len(g.writes) > n
	g.mu.Unlock()
	if queued {
		g.flush()
	}
}

// flush stores every queued write, in order; failures are logged. It
// returns once the writes queued before the call are stored: by this call
// or by the one holding writeMu, which took them. The caller must not
// hold g.mu.
func (g *abuseGuard) flush() {
	g.writeMu.Lock()
	defer g.writeMu.Unlock()
	g.mu.Lock()
	ws := g.writes
	g.writes = nil
	g.mu.Unlock()
	if err := g.store(ws); err != nil {
		g.log.Error().Err(err).Msg("abuse state")
	}
}

// store makes the writes ws: their states in one batch committed with
// Sync (a sweep's steps cost one sync, not one each; a credential's later
// state wins), then each one's Suspended flag, in order: set for a
// suspension even when the states' write failed (the credential stays
// refused), lifted only once they are stored. It returns the states'
// error joined with the last flag's (nil: all stored) and logs the other
// flags' failures. g.writeMu is held.
func (g *abuseGuard) store(ws []abuseWrite) error {
	if len(ws) == 0 {
		return nil
	}
	states := make([]store.AbuseStateWrite, 0, len(ws))
	for _, w := range ws {
		v, err := json.Marshal(&w.state)
		if err != nil {
			return err
		}
		states = append(states, store.AbuseStateWrite{Tenant: w.tenant, ClientID: w.state.ClientID, State: v})
	}
	serr := g.db.PutAbuseStates(states)
	var ferr error
	for i, w := range ws {
		if i > 0 && ferr != nil {
			g.log.Error().Err(ferr).Msg("abuse state")
		}
		ferr = g.setFlag(w, serr != nil)
	}
	return errors.Join(serr, ferr)
}

// setFlag sets the credential's Suspended flag as w says (failed: its
// state's write failed) and returns the flag's error.
func (g *abuseGuard) setFlag(w abuseWrite, failed bool) error {
	if w.flag == flagKept || (w.flag == flagLift && failed) {
		return nil
	}
	suspend := w.flag == flagSuspend
	if _, err := g.db.UpdateCredential(w.state.ClientID, func(c *store.Credential) error { c.Suspended = suspend; return nil }); err != nil {
		return fmt.Errorf("credential's suspended flag: %w", err)
	}
	return nil
}

// level returns the credential's current level.
func (g *abuseGuard) level(clientID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u := g.creds[clientID]; u != nil {
		return u.state.Level
	}
	return levelNormal
}

// observe counts one answered request and escalates at minute boundaries;
// the steps it took are stored when it returns.
func (g *abuseGuard) observe(tenant, clientID string, status int, now time.Time) {
	g.mu.Lock()
	defer g.unlock(len(g.writes))
	u := g.use(tenant, clientID)
	m := now.Unix() / 60
	if u.minute != m {
		g.closeMinute(u, now)
		u.minute, u.count, u.errors = m, 0, 0
	}
	if m > g.lastSweep {
		g.sweep(now)
	}
	u.count++
	if status >= 400 && status < 500 && status != statusClientGone && status != http.StatusTooManyRequests {
		u.errors++
	}
}

// suspended reports whether the credential's escalation reached
// suspension: the token endpoint and authentication refuse it on this as
// on the credential's Suspended flag, which is set after the step is
// stored (the level in memory refuses at once, before that write) and
// which a failed write could leave unset.
func (g *abuseGuard) suspended(clientID string) bool { return g.level(clientID) >= levelSuspension }

// signal reports an anomaly of the credential (a history reload: reload);
// a step it took is stored when it returns.
func (g *abuseGuard) signal(tenant, clientID, reason string, now time.Time) {
	g.mu.Lock()
	defer g.unlock(len(g.writes))
	u := g.use(tenant, clientID)
	u.flag(reason)
	g.maybeStep(u, now)
}

// reload counts dups, the duplicate events of one request that was almost
// all duplicates, in the credential's minute of real time; the request
// that brings the minute's count to MinReload signals a history reload
// (recarga). A step it took is stored when it returns.
func (g *abuseGuard) reload(tenant, clientID string, dups int, now time.Time) {
	g.mu.Lock()
	u := g.use(tenant, clientID)
	if m := now.Unix() / 60; u.reloadMinute != m {
		u.reloadMinute, u.reloaded = m, 0
	}
	before := u.reloaded
	u.reloaded += dups
	n := u.reloaded
	g.mu.Unlock()
	if before < g.cfg.MinReload && n >= g.cfg.MinReload {
		g.signal(tenant, clientID, fmt.Sprintf("recarga: %d eventos ya procesados en un minuto", n), now)
	}
}

// sweep closes every credential's minute that ended before now's (a flood
// followed by silence is judged too; the credential then waits for its next
// request to open a minute) and judges their days of sends that are old
// enough.
func (g *abuseGuard) sweep(now time.Time) {
	m := now.Unix() / 60
	g.lastSweep = m
	for _, u := range g.creds {
		if u.minute >= 0 && u.minute < m {
			g.closeMinute(u, now)
			u.minute, u.count, u.errors = -1, 0, 0
		}
		if len(u.sends) > 0 {
			g.judgeSends(u, now)
			g.maybeStep(u, now)
		}
		g.coolDown(u, now)
	}
}

// coolDown takes u down one level per CoolDown it spent without a step
// (and without a pending anomaly), below suspension, as one recorded step
// queued to be stored as the steps up are.
func (g *abuseGuard) coolDown(u *credUse, now time.Time) {
	lvl := u.state.Level
	if lvl == levelNormal || lvl >= levelSuspension || u.pending != "" || g.cfg.CoolDown <= 0 || u.lastStep.IsZero() {
		return
	}
	k := int(sinceStep(u, now) / g.cfg.CoolDown)
	if k < 1 {
		return
	}
	u.state.Level = max(levelNormal, lvl-k)
	u.lastStep = now
	if u.state.Level == levelNormal {
		u.lastStep = time.Time{} // as a clearance: the next anomaly steps at once
	}
	reason := fmt.Sprintf("sin anomalías en %g h", g.cfg.CoolDown.Hours())
	u.state.Steps = appendStep(u.state.Steps, AbuseStep{At: now.UTC(), Level: levelNames[u.state.Level], Reason: reason})
	g.log.Info().Str("tenant", u.tenant).Str("client_id", u.state.ClientID).Str("step", levelNames[u.state.Level]).Str("reason", reason).Msg("abuse step down")
	g.queue(u, flagKept)
}

// sinceStep is the time since u's last step, which it first sets back to
// now when it lies ahead (the clock went back since): measured from a
// step stamped ahead, the wait for the next step down (CoolDown) or up
// (StepInterval) lasted until the clock caught up, a day back a day more.
func sinceStep(u *credUse, now time.Time) time.Duration {
	if now.Before(u.lastStep) {
		u.lastStep = now
	}
	return now.Sub(u.lastStep)
}

// maxSteps is how many steps a state keeps, the latest: a caller held at
// aviso by a nightly pattern records two a day.
const maxSteps = 100

// appendStep appends s to steps, keeping the latest maxSteps.
func appendStep(steps []AbuseStep, s AbuseStep) []AbuseStep {
	steps = append(steps, s)
	if len(steps) > maxSteps {
		steps = slices.Clone(steps[len(steps)-maxSteps:])
	}
	return steps
}

// issued follows a coupon send that clientID got (a replay of a followed
// one is not counted again), up to UnconfirmedSample a day.
func (g *abuseGuard) issued(tenant, clientID, decisionID string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := tenant + "\x00" + decisionID
	if _, ok := g.sent[key]; ok {
		return
	}
	u := g.use(tenant, clientID)
	g.judgeSends(u, now)
	day := now.Unix() / 86400
	if n := len(u.sends); n == 0 || u.sends[n-1].day != day {
		u.sends = append(u.sends, sendDay{day: day})
	}
	d := &u.sends[len(u.sends)-1]
	if len(d.keys) >= g.cfg.UnconfirmedSample {
		return
	}
	d.keys = append(d.keys, key)
	g.sent[key] = sentRef{clientID: clientID, day: day}
}

// confirmed counts the confirmation of a followed send, whichever
// credential of the tenant confirmed it.
func (g *abuseGuard) confirmed(tenant, decisionID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := tenant + "\x00" + decisionID
	ref, ok := g.sent[key]
	if !ok || ref.confirmed {
		return
	}
	ref.confirmed = true
	g.sent[key] = ref
	if u := g.creds[ref.clientID]; u != nil {
		for i := range u.sends {
			if u.sends[i].day == ref.day {
				u.sends[i].confirmed++
			}
		}
	}
}

// judgeDelayDays is how many UTC days after a day of sends it is judged:
// its last send's confirmation window (engine.DecisionTTL, caduca_en) has
// then closed, so an integrator confirming late but within the window the
// API grants is never counted as leaving sends unconfirmed.
const judgeDelayDays = 1 + int64((engine.DecisionTTL+24*time.Hour-1)/(24*time.Hour))

// judgeSends judges each of u's days of sends whose confirmation window
// has closed for all of them (now's day is at least judgeDelayDays later),
// adds the anomaly when too many went unconfirmed, and stops following
// them.
func (g *abuseGuard) judgeSends(u *credUse, now time.Time) {
	today := now.Unix() / 86400
	for len(u.sends) > 0 && u.sends[0].day <= today-judgeDelayDays {
		d := u.sends[0]
		n, open := len(d.keys), len(d.keys)-d.confirmed
		if n >= g.cfg.UnconfirmedMin && float64(open) > g.cfg.UnconfirmedRatio*float64(n) {
			day := time.Unix(d.day*86400, 0).UTC().Format(time.DateOnly)
			u.flag(fmt.Sprintf("sin confirmar: %d de %d envíos del %s sin confirmación al caducar", open, n, day))
		}
		for _, k := range d.keys {
			delete(g.sent, k)
		}
		u.sends = u.sends[1:]
	}
}

func (g *abuseGuard) closeMinute(u *credUse, now time.Time) {
	if u.minute < 0 {
		return
	}
	c := g.cfg
	base := u.usual
	if u.seen > 0 && float64(u.count) > c.PeakFactor*base && u.count >= c.MinPeak {
		u.flag(fmt.Sprintf("pico: %d peticiones en un minuto, %.0f veces lo usual", u.count, float64(u.count)/max(base, 1)))
	}
	if u.count >= c.MinRequests && float64(u.errors) > c.ErrorRatio*float64(u.count) {
		u.flag(fmt.Sprintf("errores: %d de %d respuestas fueron error", u.errors, u.count))
	}
	if u.seen == 0 {
		u.usual = float64(u.count)
	} else {
		u.usual = 0.9*u.usual + 0.1*float64(u.count)
	}
	u.seen++
	g.maybeStep(u, now)
}

// maybeStep takes one step up when anomalies are pending and the last step
// is old enough: the level applies at once, and the step and its reason
// are queued, to be stored with Sync once g.mu is released (unlock), and
// at suspension the credential's Suspended flag after them.
func (g *abuseGuard) maybeStep(u *credUse, now time.Time) {
	if u.pending == "" || u.state.Level >= levelSuspension {
		u.pending = ""
		return
	}
	if !u.lastStep.IsZero() && sinceStep(u, now) < g.cfg.StepInterval {
		return
	}
	reason := u.pending
	u.pending = ""
	u.state.Level++
	u.lastStep = now
	u.state.Steps = appendStep(u.state.Steps, AbuseStep{At: now.UTC(), Level: levelNames[u.state.Level], Reason: reason})
	// The step goes in "step" (as in coupond_abuse_escalations_total): the
	// log's own "level" is the line's severity, and a second "level" key
	// made log tools read the line at level "aviso" or "suspension".
	g.log.Warn().Str("tenant", u.tenant).Str("client_id", u.state.ClientID).Str("step", levelNames[u.state.Level]).Str("reason", reason).Msg("abuse escalation")
	if g.onStep != nil {
		g.onStep(u.tenant, levelNames[u.state.Level])
	}
	flag := flagKept
	if u.state.Level == levelSuspension {
		flag = flagSuspend
	}
	g.queue(u, flag)
}

// factor is the rate-limit multiplier of a level.
func (g *abuseGuard) factor(level int) float64 {
	if level >= levelFreno {
		return g.cfg.BrakeFactor
	}
	return 1
}

// ErrNoAbuseState is returned when clearing a credential that was never flagged.
var ErrNoAbuseState = errors.New("server: credential has no escalation")

// ClearAbuse resets a credential to normal, records who cleared it and
// lifts a suspension. A credential still marked suspended whose escalation
// state is gone (a damaged state set aside at start, so the guard holds it
// at normal) is cleared as well: without that nothing could lift its
// suspension. ErrNoAbuseState when there is nothing to clear. It returns
// once the clearance and the lifted flag are stored, in order with the
// steps racing it: a step taken after the clearance is stored after it.
// Requests meanwhile wait only for the guard's memory, not for the write.
func (s *Server) ClearAbuse(clientID string, now time.Time) (*AbuseState, error) {
	g := s.abuse
	g.writeMu.Lock() // taken first: no flush takes the clearance from the queue
	defer g.writeMu.Unlock()
	g.mu.Lock()
	u := g.creds[clientID]
	if u == nil || u.state.Level == levelNormal {
		cred, ok := g.db.Credential(clientID)
		if !ok || !cred.Suspended {
			g.mu.Unlock()
			return nil, ErrNoAbuseState
		}
		u = g.use(cred.Tenant, clientID)
	}
	u.state.Level = levelNormal
	u.state.Steps = appendStep(u.state.Steps, AbuseStep{At: now.UTC(), Level: levelNames[levelNormal], Reason: "despejado por el operador"})
	u.lastStep, u.pending = time.Time{}, ""
	g.queue(u, flagLift)
	ws, st := g.writes, g.writes[len(g.writes)-1].state
	g.writes = nil
	g.mu.Unlock()
	if err := g.store(ws); err != nil { // the clearance is the last
		return nil, err
	}
	return &st, nil
}

// AbuseStates returns the escalation states of a tenant's credentials,
// and, at suspension with no step, each credential still suspended whose
// escalation state was lost (a damaged state set aside at start): it is
// refused, and "admin abuse clear" lifts it, so the listing shows it.
func (s *Server) AbuseStates(tenant string) []AbuseState {
	g := s.abuse
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []AbuseState
	listed := map[string]bool{}
	for _, u := range g.creds {
		if u.tenant == tenant && len(u.state.Steps) > 0 {
			out = append(out, u.state)
			listed[u.state.ClientID] = true
		}
	}
	for _, c := range g.db.Credentials(tenant) {
		if c.Suspended && !listed[c.ClientID] {
			out = append(out, AbuseState{ClientID: c.ClientID, Level: levelSuspension, Steps: []AbuseStep{}})
		}
	}
	return out
}
