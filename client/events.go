package client

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"

	"github.com/coupond/coupond/jsonappend"
)

// Limits of one POST /v1/eventos request.
const (
	MaxEventsPerRequest = 1000
	MaxEventsBody       = 1 << 20
)

// PublishEvents sends events with POST /v1/eventos, split into as few
// requests as the limits allow (at most 1,000 events and 1 MB each), one
// after the other, and adds up their answers. A refused event is not an
// error: it is in Rechazados, with its index in events, its Codigo and the
// Campo at fault. An event that alone exceeds 1 MB, or whose Extra is the
// type of another Tipo (an *ExtraCuponRedimido on a COMPRA_CAT), is
// rejected here (esquema_invalido) without being sent. Money (Valor, and a COMPRA_CAT's
// Margen and TicketTotal) within float64 rounding noise of whole cents (a
// sum of prices: 0.1+0.2 is 0.30000000000000004) is sent as those cents; a
// real fraction of a cent is sent as it is, and refused. Ts goes in its own
// zone and is stored as that instant; an unset Ts (the zero time.Time) is
// refused as ts_fuera_de_rango.
//
// Sending is safe to repeat: the server processes each event_id once, so
// events sent twice count in Duplicados and are stored once. Each request
// is retried on 429, 5xx and lost connections. If a request still fails,
// PublishEvents returns the totals of the requests that succeeded and the
// error; sending the same slice again completes it without duplicates.
// The error names the first event of the failed request ("publishing
// events i to j"): every event before it was answered, so sending
// events[i:] completes it too and sends less again (the server counts
// 2,000 already-processed events resent in a minute as a history reload, a
// warning on the credential).
// When ctx has no deadline, the Client's timeout (WithTimeout) bounds each
// request, retries included, not the whole slice.
func (c *Client) PublishEvents(ctx context.Context, events []Evento) (*RespuestaEventos, error) {
	total := &RespuestaEventos{Rechazados: []Rechazo{}}
	chunks, refused, err := splitEvents(events)
	if err != nil {
		return total, err
	}
	total.Rechazados = append(total.Rechazados, refused...)
	for _, ch := range chunks {
		ans, err := c.publishChunk(ctx, ch.body)
		if err != nil {
			sortRechazos(total.Rechazados)
			return total, fmt.Errorf("coupond: publishing events %d to %d: %w", ch.index[0], ch.index[len(ch.index)-1], err)
		}
		total.Aceptados += ans.Aceptados
		total.Duplicados += ans.Duplicados
		for _, r := range ans.Rechazados {
			if r.Indice >= 0 && r.Indice < len(ch.index) {
				r.Indice = ch.index[r.Indice]
			}
			total.Rechazados = append(total.Rechazados, r)
		}
	}
	sortRechazos(total.Rechazados)
	return total, nil
}

// publishChunk sends one request of PublishEvents, retried, within ctx's
// deadline or the Client's timeout.
func (c *Client) publishChunk(ctx context.Context, body []byte) (*RespuestaEventos, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var ans RespuestaEventos
	err := c.retry(ctx, 20, retrySafe, func() error {
		resp, err := c.send(ctx, http.MethodPost, c.base+"/v1/eventos", body, nil, nil)
		if err != nil {
			return err
		}
		return c.decodeAnswer(resp, &ans)
	})
	return &ans, err
}

// eventChunk is the body of one request and the caller's index of each of
// its events.
type eventChunk struct {
	body  []byte
	index []int
}

// splitEvents encodes events into request bodies of at most
// MaxEventsPerRequest events and MaxEventsBody bytes; events too big for
// any request, or whose Extra is another tipo's (extraMismatch), come back
// as rejections.
func splitEvents(events []Evento) (chunks []eventChunk, refused []Rechazo, err error) {
	const head, tail = `{"eventos":[`, `]}`
	var cur eventChunk
	var buf bytes.Buffer
	flush := func() {
		if len(cur.index) > 0 {
			buf.WriteString(tail)
			cur.body = bytes.Clone(buf.Bytes())
			chunks = append(chunks, cur)
		}
		cur = eventChunk{}
		buf.Reset()
	}
	for i := range events {
		if r, bad := extraMismatch(i, &events[i]); bad {
			refused = append(refused, r)
			continue
		}
		data, err := jsonappend.Marshal(inCents(&events[i]))
		if err != nil {
			return nil, nil, fmt.Errorf("coupond: encoding event %d: %w", i, err)
		}
		if len(head)+len(data)+len(tail) > MaxEventsBody {
			id := events[i].EventID
			refused = append(refused, Rechazo{Indice: i, EventID: &id, Codigo: "esquema_invalido",
				Mensaje: "el evento excede 1 MB por sí solo; no se envió"})
			continue
		}
		if len(cur.index) == MaxEventsPerRequest || buf.Len()+1+len(data)+len(tail) > MaxEventsBody {
			flush()
		}
		if len(cur.index) == 0 {
			buf.WriteString(head)
		} else {
			buf.WriteByte(',')
		}
		buf.Write(data)
		cur.index = append(cur.index, i)
	}
	flush()
	return chunks, refused, nil
}

func sortRechazos(r []Rechazo) {
	slices.SortStableFunc(r, func(a, b Rechazo) int { return cmp.Compare(a.Indice, b.Indice) })
}

// extraMismatch is the rejection of event i, e, when its Extra is the type
// of another tipo (an *ExtraCuponRedimido on a COMPRA_CAT): the server would
// name only the first member that type lacks ("Field required" on
// extra.margen), which does not say the type is wrong. bad is false when
// Extra is nil or fits Tipo, or Tipo is none of the six (the server then
// names tipo).
func extraMismatch(i int, e *Evento) (r Rechazo, bad bool) {
	switch e.Tipo {
	case CompraCat, CuponRecibido, CuponRedimido, CuponCaducado, Baja, Alta:
	default:
		return Rechazo{}, false
	}
	if e.Extra == nil || e.Extra.tipoEvento() == e.Tipo {
		return Rechazo{}, false
	}
	id, campo := e.EventID, "extra"
	return Rechazo{Indice: i, EventID: &id, Codigo: "esquema_invalido", Campo: &campo,
		Mensaje: fmt.Sprintf("extra es %T, el de %s; un %s lleva el suyo: no se envió", e.Extra, e.Extra.tipoEvento(), e.Tipo)}, true
}

// inCents returns a copy of e whose money (valor, and the
// margen and ticket_total of a COMPRA_CAT) is sent as whole cents when it
// is that but for float64 rounding noise: a sum of prices such as
// 0.1+0.2, 0.30000000000000004, which the API would refuse as more than
// two decimals, goes as 0.3. The caller's event is not changed.
func inCents(e *Evento) *Evento {
	cp := *e
	if e.Valor != nil {
		cp.Valor = Ptr(cents(*e.Valor))
	}
	if x, ok := e.Extra.(*ExtraCompraCat); ok && x != nil {
		xc := *x
		xc.Margen = cents(x.Margen)
		if x.TicketTotal != nil {
			xc.TicketTotal = Ptr(cents(*x.TicketTotal))
		}
		cp.Extra = &xc
	}
	return &cp
}

// centsNoise is how far, in cents, an amount may be from a whole cent and
// still count as that cent: float64 sums of prices are off by far less,
// and a real third decimal (0.1 cent or more) by far more.
const centsNoise = 1e-6

// cents returns x as the float64 nearest its whole cents when x is within
// centsNoise of them (and below 2⁵³ cents, where float64 holds them
// exactly); else, a real fraction of a cent, NaN or infinite, x itself.
func cents(x float64) float64 {
	c := x * 100
	r := math.Round(c)
	if !(math.Abs(c-r) <= centsNoise) || math.Abs(r) >= 1<<53 {
		return x
	}
	return r / 100
}
