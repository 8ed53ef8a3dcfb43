package server

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
)

// Money bounds of the event contract, in cents.
const (
	maxMXN = 1_000_000_000 * 100
)

// eventsEnvelope checks the request as a whole; each event is checked on its
// own so one bad event is a rejection, never a 422 for the request.
var eventsEnvelope = schema.Object(
	schema.Field("eventos", schema.Array(schema.Any()).Items(1, 1000)).Required(),
)

func commonEventFields(valor schema.Schema, valorRequired bool, extra schema.FieldSpec, clave schema.Schema) []schema.FieldSpec {
	v := schema.Field("valor", valor)
	if valorRequired {
		v = v.Required()
	}
	return []schema.FieldSpec{
		schema.Field("event_id", schema.ID()).Required(),
		schema.Field("cliente_ref", schema.ClienteRef()).Required(),
		schema.Field("ts", schema.Timestamp()).Required(),
		schema.Field("decision_id", schema.ID().Nullable()),
		schema.Field("tipo", schema.String().Enum(eventTypeNames()...)).Required(),
		schema.Field("clave", clave).Required(),
		v,
		extra,
	}
}

func eventTypeNames() []string {
	return []string{string(engine.CompraCat), string(engine.CuponRecibido), string(engine.CuponRedimido),
		string(engine.CuponCaducado), string(engine.Baja), string(engine.Alta)}
}

var (
	text256     = schema.String().Len(1, 256)
	text256N    = schema.String().Len(1, 256).Nullable()
	onlyZero    = schema.Money().Range(0, 0)
	moneyPos    = schema.Money().Range(0, maxMXN)
	eventByTipo = map[string]*schema.ObjectSchema{
		string(engine.CompraCat): schema.Object(commonEventFields(moneyPos, true, schema.Field("extra", schema.Object(
			schema.Field("ticket_id", schema.ID()).Required(),
			schema.Field("margen", schema.Money().Range(-maxMXN, maxMXN)).Required(),
			schema.Field("cantidad", schema.Number().Min(0)),
			schema.Field("tienda", text256N),
			schema.Field("canal", text256N),
			schema.Field("ticket_total", schema.Money().Range(0, maxMXN).Nullable()),
		)).Required(), text256)...),
		string(engine.CuponRecibido): schema.Object(commonEventFields(moneyPos, false, schema.Field("extra", schema.Object(
			schema.Field("cupon_emitido_id", schema.ID()).Required(),
			schema.Field("campana_id", schema.ID().Nullable()),
			schema.Field("caducidad", schema.Timestamp()).Required(),
			schema.Field("canal", text256N),
			schema.Field("descuento_pct", schema.Number().Range(0, 100).Nullable()),
		)).Required(), text256)...),
		string(engine.CuponRedimido): schema.Object(commonEventFields(moneyPos, true, schema.Field("extra", schema.Object(
			schema.Field("cupon_emitido_id", schema.ID()).Required(),
			schema.Field("ticket_id", schema.ID()).Required(),
		)).Required(), text256)...),
		string(engine.CuponCaducado): schema.Object(commonEventFields(onlyZero, false, schema.Field("extra", schema.Object(
			schema.Field("cupon_emitido_id", schema.ID()).Required(),
		)).Required(), text256)...),
		string(engine.Baja): schema.Object(commonEventFields(onlyZero, false, schema.Field("extra", schema.Object(
			schema.Field("canal", text256N),
		).Nullable()), schema.String().Enum(engine.BajaComunicaciones, engine.BajaCuenta))...),
		string(engine.Alta): schema.Object(commonEventFields(onlyZero, false, schema.Field("extra", schema.Object(
			schema.Field("segmento", text256N),
			schema.Field("perfil", text256N),
		).Nullable()), text256)...),
	}
	// eventTipoOnly finds the tipo before the event's own schema applies.
	eventTipoOnly = schema.Object(schema.Field("tipo", schema.String().Enum(eventTypeNames()...)).Required()).AllowExtra()
)

// tsWindow is the accepted range of an event's ts around the tenant clock.
const (
	tsAhead  = 5 * time.Minute
	tsBehind = 1096 * 24 * time.Hour
)

// tsBounds are the whole seconds that bound the accepted ts range around
// the tenant clock now, as the rejection states them: every instant from lo
// to hi, both included, is accepted (lo rounded up, hi down, so that the
// bounds named are themselves in range when now has a fraction).
func tsBounds(now time.Time) (lo, hi time.Time) {
	lo, hi = now.Add(-tsBehind), now.Add(tsAhead).Truncate(time.Second)
	if t := lo.Truncate(time.Second); t.Before(lo) {
		lo = t.Add(time.Second)
	}
	return lo, hi
}

func (s *Server) handleEvents(c *call) error {
	env, bad := eventsEnvelope.Decode(c.body, "body")
	if len(bad) > 0 {
		return &validationError{detail: bad}
	}
	// Quarantine: a client at that abuse step has its events kept, applied
	// when the operator releases them.
	hold := c.abuseLevel >= levelCuarentena
	now := c.now()
	var rejected []engine.Rejection
	items := env.Field("eventos")
	good := make([]engine.IngestEvent, 0, items.Len())
	check := newEventChecker(now, true, len(c.body))
	for i, ev := range items.Items() {
		item, rej := check.check(i, ev)
		if rej != nil {
			rejected = append(rejected, *rej)
			continue
		}
		good = append(good, item)
	}
	if hold && c.overQuota != nil {
		return c.overQuota // held events take no quota: nothing to replay
	}
	res, err := s.Engine.Ingester.Receive(c.tenant.ID, good, engine.Delivery{
		ClientID: c.clientID, Trace: c.trace, At: c.start, Now: now, Hold: hold,
	})
	if err != nil {
		return quotaError(err) // new events past the quota: 429, nothing applied
	}
	if n := len(good); n >= 500 && res.Duplicados*10 >= n*9 {
		c.reloaded = res.Duplicados // the abuse guard adds up a minute's (abuseGuard.reload)
	}
	rejected = mergeRejections(rejected, res.Rechazados)
	if c.overQuota != nil && res.Aceptados == 0 && len(rejected) > 0 {
		return c.overQuota // past the quota, only a resend of accepted events is answered
	}
	c.answer = answer{http.StatusOK, api.RespuestaEventos{Aceptados: res.Aceptados, Duplicados: res.Duplicados, Rechazados: orEmpty(rejected)}}
	return nil
}

func orEmpty(r []engine.Rejection) []engine.Rejection {
	if r == nil {
		return []engine.Rejection{}
	}
	return r
}

// mergeRejections merges two lists ordered by indice.
func mergeRejections(a, b []engine.Rejection) []engine.Rejection {
	if len(b) == 0 {
		return a
	}
	out := make([]engine.Rejection, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j >= len(b) || (i < len(a) && a[i].Indice < b[j].Indice) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

func reject(i int, v schema.Value, codigo, campo, msg string) *engine.Rejection {
	r := &engine.Rejection{Indice: i, Codigo: codigo, Mensaje: msg}
	if id := v.Field("event_id"); id.Kind() == schema.KindString {
		s := truncateRunes(id.String(), maxEcho) // a refused id may be of any length
		r.EventID = &s
	}
	if campo != "" {
		r.Campo = &campo
	}
	r.Mensaje = truncateRunes(r.Mensaje, 512)
	return r
}

// eventChecker validates and converts the events of one request (or one
// release from quarantine), reusing its memory from one event to the next.
type eventChecker struct {
	now     time.Time // the tenant clock
	checkTS bool      // check the ts range around now
	schema  schema.Checker
	// canon holds the canonical JSON of the events checked so far, one
	// after another; each IngestEvent.Canonical is its own part of it.
	canon []byte
}

// newEventChecker returns an eventChecker for events of about size bytes
// of JSON in all.
func newEventChecker(now time.Time, checkTS bool, size int) *eventChecker {
	return &eventChecker{now: now, checkTS: checkTS, canon: make([]byte, 0, size)}
}

// check validates event i against its tipo's schema and, when k.checkTS,
// the ts range around k.now (events released from quarantine were in range
// when they arrived), and converts it. The decision_id's signature is the
// engine's to check (Ingest).
func (k *eventChecker) check(i int, v schema.Value) (engine.IngestEvent, *engine.Rejection) {
	if rej := k.validate(i, v); rej != nil {
		return engine.IngestEvent{}, rej
	}
	ev := engine.Event{
		ID: v.Field("event_id").String(), ClienteRef: v.Field("cliente_ref").String(), TS: v.Field("ts").Time(),
		Tipo: engine.EventType(v.Field("tipo").String()), Clave: v.Field("clave").String(),
	}
	now := k.now
	if k.checkTS && (ev.TS.After(now.Add(tsAhead)) || ev.TS.Before(now.Add(-tsBehind))) {
		return engine.IngestEvent{}, reject(i, v, "ts_fuera_de_rango", "ts", tsWindowMsg(now))
	}
	if d := v.Field("decision_id"); d.Present() && !d.IsNull() {
		ev.DecisionID = d.String()
	}
	if val := v.Field("valor"); val.Present() && !val.IsNull() {
		ev.ValorCents = val.Cents()
	}
	convertExtra(&ev, v.Field("extra"))
	start := len(k.canon)
	k.canon = appendContent(k.canon, v)
	it := engine.IngestEvent{Index: i, Event: ev, Canonical: k.canon[start:len(k.canon):len(k.canon)]}
	if zeroByDefault(ev.Tipo) && ev.ValorCents == 0 {
		start = len(k.canon)
		if k.canon = appendAlike(k.canon, it.Canonical, v.Field("valor")); len(k.canon) > start {
			it.Alike = k.canon[start:len(k.canon):len(k.canon)]
		}
	}
	if sameAsWritten(v) {
		return it, nil
	}
	start = len(k.canon)
	if k.canon = v.AppendJSON(k.canon); bytes.Equal(k.canon[start:], it.Canonical) {
		k.canon = k.canon[:start]
	} else {
		it.AsWritten = k.canon[start:len(k.canon):len(k.canon)]
	}
	return it, nil
}

// zeroByDefault reports whether t's valor is optional and, absent, stored
// as 0: an event of its tipo sent with "valor": 0 and the same event
// without valor are one content (IngestEvent.Alike).
func zeroByDefault(t engine.EventType) bool {
	switch t {
	case engine.CuponRecibido, engine.CuponCaducado, engine.Baja, engine.Alta:
		return true
	}
	return false
}

// appendAlike appends to dst the canonical JSON canon of an event whose
// valor (the member val) is 0 or absent, with that valor left out if
// present and "valor":0 added if absent. valor is canon's last member
// (appendContent sorts the names, and no event member sorts after it).
func appendAlike(dst, canon []byte, val schema.Value) []byte {
	const member = `,"valor":`
	if val.Present() && !val.IsNull() {
		i := bytes.LastIndex(canon, []byte(member))
		if i < 0 {
			return dst // not so written: no other form
		}
		return append(append(dst, canon[:i]...), '}')
	}
	return append(append(append(dst, canon[:len(canon)-1]...), member...), "0}"...)
}

// sameAsWritten reports, without writing either, that appendContent and
// Value.AppendJSON write the validated event (or object) v alike: it has
// no null member and no empty object at any depth, and its ts and
// caducidad are written as the UTC instant's RFC 3339 text already. Most
// events are so, and need no as-written form (IngestEvent.AsWritten).
func sameAsWritten(v schema.Value) bool {
	n := 0
	for name, m := range v.Members() {
		n++
		switch {
		case m.IsNull():
			return false
		case m.Kind() == schema.KindObject:
			if !sameAsWritten(m) {
				return false
			}
		case name == "ts" || name == "caducidad":
			var buf [40]byte
			if string(m.Time().UTC().AppendFormat(buf[:0], time.RFC3339Nano)) != m.String() {
				return false
			}
		}
	}
	return n > 0
}

// appendContent appends the canonical JSON of the validated event (or of
// its extra) v: what two deliveries of one event_id are compared by, so
// that the same event written another way is a duplicate, not a
// "duplicado" rejection. Members are sorted by name and numbers spelled
// canonically (Value.AppendJSON); a member that is null, or an object with
// nothing but nulls, is left out, as absent (the nullable fields default to
// null, and extra is optional where it may be empty); the timestamps ts and
// extra.caducidad are written as the UTC instant they name (RFC 3339, Z),
// which is what is stored. The result is itself a valid event (the abuse
// quarantine holds it and validates it again on release).
func appendContent(dst []byte, v schema.Value) []byte {
	var stack [16]contentMember
	ms := stack[:0]
	for name, m := range v.Members() {
		if !m.IsNull() {
			ms = append(ms, contentMember{name, m})
		}
	}
	slices.SortFunc(ms, func(a, b contentMember) int { return strings.Compare(a.name, b.name) })
	dst = append(dst, '{')
	n := 0
	for _, m := range ms {
		mark := len(dst)
		if n > 0 {
			dst = append(dst, ',')
		}
		// Names are the schema's (unknown ones were rejected): plain ASCII.
		dst = append(append(append(dst, '"'), m.name...), '"', ':')
		switch {
		case m.v.Kind() == schema.KindObject:
			inner := len(dst)
			if dst = appendContent(dst, m.v); len(dst)-inner == len("{}") {
				dst = dst[:mark]
				continue
			}
		case m.name == "ts" || m.name == "caducidad":
			dst = append(m.v.Time().UTC().AppendFormat(append(dst, '"'), time.RFC3339Nano), '"')
		default:
			dst = m.v.AppendJSON(dst)
		}
		n++
	}
	return append(dst, '}')
}

// contentMember is one member of an object appendContent writes.
type contentMember struct {
	name string
	v    schema.Value
}

// validate checks event i against the schema of its tipo; nil when it
// passes.
func (k *eventChecker) validate(i int, v schema.Value) *engine.Rejection {
	if v.Kind() != schema.KindObject {
		return reject(i, v, "esquema_invalido", "", "cada evento debe ser un objeto JSON")
	}
	// A tipo that names a schema is a valid one: eventTipoOnly, which says
	// what is wrong with any other, need not run.
	sch, ok := eventByTipo[v.Field("tipo").String()]
	if !ok {
		msg := "tipo desconocido"
		if bad := k.schema.Validate(eventTipoOnly, v); len(bad) > 0 {
			msg = bad[0].Msg
		}
		return reject(i, v, "esquema_invalido", "tipo", msg)
	}
	bad := k.schema.Validate(sch, v)
	if len(bad) == 0 {
		return nil
	}
	first := bad[0]
	for _, b := range bad {
		if b.Type != "extra_forbidden" {
			first = b
			break
		}
	}
	codigo, msg := "esquema_invalido", first.Msg
	switch {
	case first.Type == "extra_forbidden":
		codigo = "campo_desconocido"
	case first.Type == "value_error" && first.Dotted(0) == "ts":
		// The event's own ts keeps §2's code for any instant outside
		// its window, the API's range included (contract §8), and its
		// message names that window, not the API's range (an unset Go
		// time.Time is year 1, refused by the range).
		codigo = "ts_fuera_de_rango"
		if k.checkTS {
			msg = tsWindowMsg(k.now)
		}
	case first.Type == "missing":
		msg += lookalikeHint(first, bad)
	}
	// campo names the member as a 422's loc does (redactViolations): a
	// member name that looks like a secret is "***", a long one is cut.
	campo := redactViolations([]schema.Violation{first})[0].Dotted(0)
	return reject(i, v, codigo, campo, msg)
}

// lookalikeHint is what the mensaje of a missing member adds when the
// event holds, beside it, an unknown member whose name is the missing one's
// but for case and accents ("valór" or "Valor" for valor, "márgen" for
// extra.margen): the two look alike on screen, and the rejection names only
// the missing one. "" when there is none.
func lookalikeHint(missing schema.Violation, bad []schema.Violation) string {
	n := len(missing.Loc)
	if n == 0 {
		return ""
	}
	name, _ := missing.Loc[n-1].(string)
	for _, b := range bad {
		if b.Type != "extra_forbidden" || len(b.Loc) != n || !slices.Equal(b.Loc[:n-1], missing.Loc[:n-1]) {
			continue
		}
		if got, _ := b.Loc[n-1].(string); got != name && foldName(got) == foldName(name) {
			return "; se recibió «" + got + "»: los nombres de los campos van en minúsculas y sin acentos"
		}
	}
	return ""
}

// foldName is a member name in lower case without the accents of Spanish
// (unaccented, the table the token endpoint's error_description uses).
func foldName(s string) string {
	return strings.Map(func(r rune) rune {
		r = unicode.ToLower(r)
		if a, ok := unaccented[r]; ok {
			return a
		}
		return r
	}, s)
}

// tsWindowMsg is the mensaje of an event's ts_fuera_de_rango: the window
// of instants the tenant clock now accepts.
func tsWindowMsg(now time.Time) string {
	lo, hi := tsBounds(now)
	return fmt.Sprintf("ts debe estar entre %s y %s (reloj del inquilino)", lo.Format(time.RFC3339), hi.Format(time.RFC3339))
}

// convertExtra sets the fields of ev that come from its validated extra.
func convertExtra(ev *engine.Event, x schema.Value) {
	str := func(name string) string {
		if f := x.Field(name); f.Present() && !f.IsNull() {
			return f.String()
		}
		return ""
	}
	ev.TicketID, ev.Tienda, ev.Canal = str("ticket_id"), str("tienda"), str("canal")
	ev.CuponEmitidoID, ev.CampanaID = str("cupon_emitido_id"), str("campana_id")
	ev.Segmento, ev.Perfil = str("segmento"), str("perfil")
	if f := x.Field("margen"); f.Present() {
		ev.MargenCents = f.Cents()
	}
	if f := x.Field("cantidad"); f.Present() && !f.IsNull() {
		ev.Cantidad, ev.HasCantidad = f.Float(), true
	}
	if f := x.Field("ticket_total"); f.Present() && !f.IsNull() {
		ev.TicketTotalCents, ev.HasTicketTotal = f.Cents(), true
	}
	if f := x.Field("caducidad"); f.Present() {
		ev.Caducidad = f.Time()
	}
	if f := x.Field("descuento_pct"); f.Present() && !f.IsNull() {
		ev.DescuentoPct, ev.HasDescuentoPct = f.Float(), true
	}
}
