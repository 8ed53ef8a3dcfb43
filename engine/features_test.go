package engine

import (
	"fmt"
	"math"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// featNow is the fixed "tenant clock" of these tests.
var featNow = time.Date(2025, 6, 15, 10, 30, 0, 0, time.UTC)

// daysAgo returns featNow minus n days (at the same time of day).
func daysAgo(n int) time.Time { return featNow.AddDate(0, 0, -n) }

func buy(ts time.Time, ticket, cat string, valorCents, margenCents int64) *Event {
	return &Event{
		ID: fmt.Sprintf("ev-%s-%s", ticket, cat), ClienteRef: "cliente-0001", TS: ts, Tipo: CompraCat,
		Clave: cat, ValorCents: valorCents, TicketID: ticket, MargenCents: margenCents,
	}
}

func coupon(ts time.Time, tipo EventType, id string) *Event {
	return &Event{ID: "ev-" + string(tipo) + id, ClienteRef: "cliente-0001", TS: ts, Tipo: tipo, Clave: "10pct", CuponEmitidoID: id}
}

func baja(ts time.Time, clave, canal string) *Event {
	return &Event{ID: "ev-baja", ClienteRef: "cliente-0001", TS: ts, Tipo: Baja, Clave: clave, Canal: canal}
}

func alta(ts time.Time, canal, segmento string) *Event {
	return &Event{ID: "ev-alta", ClienteRef: "cliente-0001", TS: ts, Tipo: Alta, Clave: canal, Segmento: segmento}
}

func applyAll(t testing.TB, evs ...*Event) *Features {
	t.Helper()
	f := &Features{}
	for _, e := range evs {
		f.Apply(e)
	}
	return f
}

// values reads the named features at now.
func values(t testing.TB, f *Features, now time.Time, names ...string) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, n := range names {
		v, ok := f.Get(n, now)
		if !ok {
			t.Fatalf("Get(%q) reported an unknown feature", n)
		}
		m[n] = v
	}
	return m
}

// checkValues checks that the features of f at now named in want have
// want's values (to 1e-12).
func checkValues(t testing.TB, f *Features, now time.Time, want map[string]float64) {
	t.Helper()
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	if diff := cmp.Diff(want, values(t, f, now, names...), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
}

// yearOfWeeklyPurchases is the benchmark customer: a ticket every week for a
// year, three of eight categories per ticket, a coupon every four weeks
// (half redeemed, half expired), signed up a month before the first ticket.
func yearOfWeeklyPurchases() []*Event {
	cats := []string{"abarrotes", "lacteos", "bebidas", "limpieza", "higiene", "mascotas", "farmacia", "panaderia"}
	evs := []*Event{alta(daysAgo(395), "app", "frecuente")}
	for w := 0; w < 52; w++ {
		ts := daysAgo(364 - 7*w)
		ticket := fmt.Sprintf("T%04d", w)
		for c := 0; c < 3; c++ {
			evs = append(evs, buy(ts, ticket, cats[(w+c*3)%len(cats)], int64(10000+w*137+c*2500), int64(1500+c*300)))
		}
		if w%4 == 0 {
			id := fmt.Sprintf("C%03d", w)
			evs = append(evs, coupon(ts.Add(-48*time.Hour), CuponRecibido, id))
			if w%8 == 0 {
				evs = append(evs, coupon(ts, CuponRedimido, id))
			} else {
				evs = append(evs, coupon(ts.Add(72*time.Hour), CuponCaducado, id))
			}
		}
	}
	return evs
}

func featCmpOpts() cmp.Option {
	return cmp.Options{
		cmp.AllowUnexported(Features{}, featDay{}, featTicket{}, featCat{}),
		cmpopts.EquateEmpty(),
	}
}

func TestEventEncodeRoundTrip(t *testing.T) {
	ts := time.Date(2025, 6, 1, 8, 15, 30, 123456789, time.UTC)
	tests := []struct {
		name string
		e    Event
	}{
		{"compra minimal", Event{ID: "e1", ClienteRef: "cliente-0001", TS: ts, Tipo: CompraCat, Clave: "abarrotes", TicketID: "T1"}},
		{"compra full", Event{
			ID: "e2", ClienteRef: "cliente-0001", TS: ts, Tipo: CompraCat, Clave: "abarrotes", DecisionID: "d-1",
			ValorCents: 123456, TicketID: "T1", MargenCents: -2500, Cantidad: 2.5, HasCantidad: true,
			Tienda: "centro", Canal: "tienda", TicketTotalCents: 0, HasTicketTotal: true,
		}},
		{"cupon recibido", Event{
			ID: "e3", ClienteRef: "cliente-0001", TS: ts, Tipo: CuponRecibido, Clave: "10pct", DecisionID: "d-2",
			CuponEmitidoID: "C1", CampanaID: "verano", Caducidad: ts.AddDate(0, 0, 30), Canal: "push",
			DescuentoPct: 10, HasDescuentoPct: true,
		}},
		{"cupon redimido", Event{ID: "e4", ClienteRef: "c2345678", TS: ts, Tipo: CuponRedimido, Clave: "10pct", ValorCents: 5000, CuponEmitidoID: "C1", TicketID: "T9"}},
		{"cupon caducado", Event{ID: "e5", ClienteRef: "c2345678", TS: ts, Tipo: CuponCaducado, Clave: "10pct", CuponEmitidoID: "C1"}},
		{"baja", Event{ID: "e6", ClienteRef: "c2345678", TS: ts, Tipo: Baja, Clave: BajaComunicaciones, Canal: "sms"}},
		{"alta", Event{ID: "e7", ClienteRef: "c2345678", TS: ts, Tipo: Alta, Clave: "web", Segmento: "vip", Perfil: "familia"}},
		{"before 1970", Event{ID: "e8", ClienteRef: "c2345678", TS: time.Date(1969, 12, 31, 23, 59, 59, 5, time.UTC), Tipo: Alta, Clave: "web"}},
		{"zero time", Event{ID: "e9", Tipo: Alta}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.e.AppendEncode([]byte("prefix"))
			got, ok := DecodeEvent(b[len("prefix"):])
			if !ok {
				t.Fatalf("DecodeEvent(%x) = false", b)
			}
			if diff := cmp.Diff(tt.e, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			if got.TS.Location() != time.UTC {
				t.Errorf("TS location = %v, want UTC", got.TS.Location())
			}
		})
	}
}

func TestDecodeEventRejects(t *testing.T) {
	good := (&Event{ID: "e1", ClienteRef: "cliente-0001", TS: featNow, Tipo: CompraCat, Clave: "x", TicketID: "T"}).AppendEncode(nil)
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version", append([]byte{2}, good[1:]...)},
		{"tipo", append([]byte{1, 6}, good[2:]...)},
		{"unknown bit", append([]byte{1, 0, 0x80, 0x80, 0x01}, good[3:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"nan", (&Event{Tipo: CompraCat, HasCantidad: true, Cantidad: math.NaN()}).AppendEncode(nil)},
		{"unknown tipo", (&Event{Tipo: "OTRO"}).AppendEncode(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := DecodeEvent(tt.b); ok {
				t.Errorf("DecodeEvent(%x) = %+v, true; want false", tt.b, got)
			}
		})
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, e := range yearOfWeeklyPurchases()[:6] {
		f.Add(e.AppendEncode(nil))
	}
	f.Add((&Event{Tipo: CuponRecibido, Caducidad: featNow, HasDescuentoPct: true, DescuentoPct: 12.5}).AppendEncode(nil))
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		reDecode(t, b, DecodeEvent)
	})
}

// reDecode decodes b and, when it decodes, checks that its re-encoding
// decodes to the same value (compared with opts); it returns the value and
// whether b decoded.
func reDecode[T any, PT interface {
	*T
	AppendEncode([]byte) []byte
}](t *testing.T, b []byte, decode func([]byte) (T, bool), opts ...cmp.Option) (T, bool) {
	t.Helper()
	v, ok := decode(b)
	if !ok {
		return v, false
	}
	again, ok := decode(PT(&v).AppendEncode(nil))
	if !ok {
		t.Fatalf("re-encoding of %+v does not decode", v)
	}
	if diff := cmp.Diff(v, again, opts...); diff != "" {
		t.Fatalf("round trip (-first +second):\n%s", diff)
	}
	return v, true
}

func TestEventTypeCodes(t *testing.T) {
	// The codes are persistent: this table must never change.
	want := map[EventType]byte{CompraCat: 0, CuponRecibido: 1, CuponRedimido: 2, CuponCaducado: 3, Baja: 4, Alta: 5}
	for tipo, code := range want {
		if got := tipo.index(); got != code {
			t.Errorf("%s.index() = %d, want %d", tipo, got, code)
		}
		if got, ok := eventTypeAt(code); !ok || got != tipo {
			t.Errorf("eventTypeAt(%d) = %q, %v; want %q, true", code, got, ok, tipo)
		}
	}
	if _, ok := eventTypeAt(6); ok {
		t.Error("eventTypeAt(6) ok, want false")
	}
	if EventType("OTRO").Valid() {
		t.Error(`EventType("OTRO").Valid() = true`)
	}
}

func TestFeaturesWindows(t *testing.T) {
	tests := []struct {
		name string
		evs  []*Event
		now  time.Time
		want map[string]float64
	}{
		{
			name: "no history",
			now:  featNow,
			want: map[string]float64{
				"recencia_dias": DaysNever, "frecuencia_30d": 0, "gasto_30d_mxn": 0, "tickets_total": 0,
				"ticket_promedio_mxn": 0, "dias_desde_ultimo_cupon": DaysNever, "antiguedad_dias": 0,
			},
		},
		{
			name: "purchase today",
			evs:  []*Event{buy(featNow.Add(-time.Hour), "T1", "a", 10050, 2000)},
			now:  featNow,
			want: map[string]float64{
				"recencia_dias": 0, "frecuencia_30d": 1, "frecuencia_365d": 1, "gasto_30d_mxn": 100.5,
				"margen_30d_mxn": 20, "tasa_margen_365d": 2000.0 / 10050, "tickets_total": 1, "ticket_promedio_mxn": 100.5,
				"antiguedad_dias": 0,
			},
		},
		{
			name: "purchase 29 days ago is in the 30-day window",
			evs:  []*Event{buy(daysAgo(29), "T1", "a", 10000, 1000)},
			now:  featNow,
			want: map[string]float64{"recencia_dias": 29, "frecuencia_30d": 1, "gasto_30d_mxn": 100, "gasto_90d_mxn": 100},
		},
		{
			name: "purchase 30 days ago has left the 30-day window",
			evs:  []*Event{buy(daysAgo(30), "T1", "a", 10000, 1000)},
			now:  featNow,
			want: map[string]float64{"recencia_dias": 30, "frecuencia_30d": 0, "gasto_30d_mxn": 0, "gasto_90d_mxn": 100},
		},
		{
			name: "purchase 31 days ago has left the 30-day window",
			evs:  []*Event{buy(daysAgo(31), "T1", "a", 10000, 1000)},
			now:  featNow,
			want: map[string]float64{"recencia_dias": 31, "frecuencia_30d": 0, "margen_30d_mxn": 0, "frecuencia_90d": 1, "margen_90d_mxn": 10},
		},
		{
			name: "window is by UTC calendar day: 23:59 yesterday is 1 day ago at 00:01",
			evs:  []*Event{buy(time.Date(2025, 6, 14, 23, 59, 0, 0, time.UTC), "T1", "a", 10000, 1000)},
			now:  time.Date(2025, 6, 15, 0, 1, 0, 0, time.UTC),
			want: map[string]float64{"recencia_dias": 1, "frecuencia_30d": 1},
		},
		{
			name: "the same features rolled forward a year",
			evs:  []*Event{buy(daysAgo(10), "T1", "a", 10000, 1000), buy(daysAgo(100), "T2", "a", 5000, 500)},
			now:  featNow.AddDate(0, 0, 356),
			want: map[string]float64{
				"recencia_dias": 366, "frecuencia_30d": 0, "frecuencia_365d": 0, "gasto_365d_mxn": 0,
				"tickets_total": 2, "gasto_total_mxn": 150, "ticket_promedio_mxn": 75,
			},
		},
		{
			name: "364 days ago is in the 365-day window, 365 is out",
			evs:  []*Event{buy(daysAgo(364), "T1", "a", 10000, 1000), buy(daysAgo(365), "T2", "a", 5000, 500)},
			now:  featNow,
			want: map[string]float64{"frecuencia_365d": 1, "gasto_365d_mxn": 100, "tickets_total": 2},
		},
		{
			name: "an event after now counts as today",
			evs:  []*Event{buy(featNow.Add(3*time.Minute), "T1", "a", 10000, 1000)},
			now:  featNow,
			want: map[string]float64{"recencia_dias": 0, "frecuencia_30d": 1},
		},
		{
			name: "two categories of one ticket are one ticket",
			evs:  []*Event{buy(daysAgo(3), "T1", "a", 10000, 1000), buy(daysAgo(3), "T1", "b", 30000, 3000)},
			now:  featNow,
			want: map[string]float64{"frecuencia_30d": 1, "tickets_total": 1, "gasto_30d_mxn": 400, "ticket_promedio_mxn": 400},
		},
		{
			name: "coupons",
			evs: []*Event{
				alta(daysAgo(400), "app", ""),
				coupon(daysAgo(200), CuponRecibido, "C1"), coupon(daysAgo(190), CuponRedimido, "C1"),
				coupon(daysAgo(60), CuponRecibido, "C2"), coupon(daysAgo(30), CuponCaducado, "C2"),
				coupon(daysAgo(5), CuponRecibido, "C3"), coupon(daysAgo(2), CuponRedimido, "C3"),
			},
			now: featNow,
			want: map[string]float64{
				"cupones_recibidos_90d": 2, "cupones_recibidos_365d": 3, "cupones_redimidos_90d": 1,
				"cupones_redimidos_365d": 2, "cupones_caducados_365d": 1, "tasa_redencion_365d": 2.0 / 3,
				"dias_desde_ultimo_cupon": 5, "antiguedad_dias": 400, "recencia_dias": DaysNever,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValues(t, applyAll(t, tt.evs...), tt.now, tt.want)
		})
	}
}

func TestFeaturesOrderIndependent(t *testing.T) {
	evs := yearOfWeeklyPurchases()
	inOrder := applyAll(t, evs...)
	orders := map[string][]*Event{}
	rev := make([]*Event, len(evs))
	for i, e := range evs {
		rev[len(evs)-1-i] = e
	}
	orders["reversed"] = rev
	interleaved := make([]*Event, 0, len(evs))
	for i := 0; i < len(evs); i += 2 {
		interleaved = append(interleaved, evs[i])
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if i%2 == 1 {
			interleaved = append(interleaved, evs[i])
		}
	}
	orders["evens then odds backwards"] = interleaved
	want := inOrder.Export(featNow)
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			f := &Features{}
			late := 0
			for _, e := range order {
				if f.Apply(e)&FlagOutOfOrder != 0 {
					late++
				}
			}
			if late == 0 {
				t.Errorf("no event flagged out of order")
			}
			if diff := cmp.Diff(want, f.Export(featNow), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("features (-in order +%s):\n%s", name, diff)
			}
		})
	}
}

func TestFeaturesFlags(t *testing.T) {
	withTotal := func(e *Event, total int64) *Event {
		e.TicketTotalCents, e.HasTicketTotal = total, true
		return e
	}
	tests := []struct {
		name string
		evs  []*Event
		want []DataFlags // flags of each Apply
	}{
		{
			name: "in order",
			evs:  []*Event{buy(daysAgo(3), "T1", "a", 100, 10), buy(daysAgo(2), "T2", "a", 100, 10)},
			want: []DataFlags{0, 0},
		},
		{
			name: "same ts is not out of order",
			evs:  []*Event{buy(daysAgo(3), "T1", "a", 100, 10), buy(daysAgo(3), "T1", "b", 100, 10)},
			want: []DataFlags{0, 0},
		},
		{
			name: "late event",
			evs:  []*Event{buy(daysAgo(2), "T2", "a", 100, 10), buy(daysAgo(3), "T1", "a", 100, 10)},
			want: []DataFlags{0, FlagOutOfOrder},
		},
		{
			name: "negative margin",
			evs:  []*Event{buy(daysAgo(3), "T1", "a", 100, -10)},
			want: []DataFlags{FlagNegativeMargin},
		},
		{
			name: "amount with VAT against total without",
			evs:  []*Event{withTotal(buy(daysAgo(3), "T1", "a", 11600, 10), 10000)},
			want: []DataFlags{FlagVATSuspect},
		},
		{
			name: "categories within the total",
			evs: []*Event{
				withTotal(buy(daysAgo(3), "T1", "a", 6000, 10), 10000),
				withTotal(buy(daysAgo(3), "T1", "b", 4000, 10), 10000),
			},
			want: []DataFlags{0, 0},
		},
		{
			name: "rounding within 1 MXN is tolerated",
			evs:  []*Event{withTotal(buy(daysAgo(3), "T1", "a", 10099, 10), 10000)},
			want: []DataFlags{0},
		},
		{
			name: "categories cross the total once",
			evs: []*Event{
				withTotal(buy(daysAgo(3), "T1", "a", 6960, 10), 10000),
				withTotal(buy(daysAgo(3), "T1", "b", 4640, 10), 10000),
				withTotal(buy(daysAgo(3), "T1", "c", 1160, 10), 10000),
			},
			want: []DataFlags{0, FlagVATSuspect, 0},
		},
		{
			name: "ticket beyond the horizon: single-event check",
			evs: []*Event{
				buy(daysAgo(1), "T2", "a", 100, 10),
				withTotal(buy(daysAgo(500), "T1", "a", 11600, 10), 10000),
			},
			want: []DataFlags{0, FlagOutOfOrder | FlagVATSuspect | FlagBeyondHorizon},
		},
		{
			name: "after closure",
			evs: []*Event{
				baja(daysAgo(10), BajaCuenta, ""),
				buy(daysAgo(5), "T1", "a", 100, -10),
				coupon(daysAgo(4), CuponRecibido, "C1"),
				buy(daysAgo(20), "T0", "a", 100, 10),
			},
			want: []DataFlags{0, FlagAfterClosure, FlagAfterClosure, FlagOutOfOrder},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Features{}
			var got []DataFlags
			for _, e := range tt.evs {
				got = append(got, f.Apply(e))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDataFlagsString(t *testing.T) {
	for _, tt := range []struct {
		f    DataFlags
		want string
	}{
		{0, ""},
		{FlagOutOfOrder, "out_of_order"},
		{FlagNegativeMargin | FlagBeyondHorizon, "negative_margin|beyond_horizon"},
		{FlagVATSuspect | FlagAfterClosure, "vat_suspect|after_closure"},
	} {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("DataFlags(%d).String() = %q, want %q", tt.f, got, tt.want)
		}
	}
}

func TestFeaturesOptOut(t *testing.T) {
	type probe struct {
		All, SMS, SMSUpper, Push, Empty bool
		Global, Canales                 float64
	}
	tests := []struct {
		name string
		evs  []*Event
		want probe
	}{
		{"none", nil, probe{}},
		{"one channel", []*Event{baja(daysAgo(3), BajaComunicaciones, "SMS")},
			probe{SMS: true, SMSUpper: true, Canales: 1}},
		{"two channels, one repeated", []*Event{
			baja(daysAgo(3), BajaComunicaciones, "sms"), baja(daysAgo(2), BajaComunicaciones, "push"),
			baja(daysAgo(1), BajaComunicaciones, "Sms"),
		}, probe{SMS: true, SMSUpper: true, Push: true, Canales: 2}},
		{"all channels", []*Event{baja(daysAgo(3), BajaComunicaciones, "")},
			probe{All: true, SMS: true, SMSUpper: true, Push: true, Empty: true, Global: 1}},
		{"channel then all", []*Event{baja(daysAgo(3), BajaComunicaciones, "sms"), baja(daysAgo(2), BajaComunicaciones, "")},
			probe{All: true, SMS: true, SMSUpper: true, Push: true, Empty: true, Global: 1}},
		{"ALTA does not undo an opt-out", []*Event{baja(daysAgo(3), BajaComunicaciones, "sms"), alta(daysAgo(1), "web", "")},
			probe{SMS: true, SMSUpper: true, Canales: 1}},
		{"account closure is not an opt-out", []*Event{baja(daysAgo(3), BajaCuenta, "")}, probe{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := applyAll(t, tt.evs...)
			v := values(t, f, featNow, "baja_comunicaciones", "canales_con_baja")
			got := probe{
				All: f.OptedOut("whatsapp"), SMS: f.OptedOut("sms"), SMSUpper: f.OptedOut("SMS"), Push: f.OptedOut("push"),
				Empty: f.OptedOut(""), Global: v["baja_comunicaciones"], Canales: v["canales_con_baja"],
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("opt-out (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFeaturesOptOutCap(t *testing.T) {
	f := &Features{}
	for i := 0; i < featMaxOptOut; i++ {
		f.Apply(baja(daysAgo(3), BajaComunicaciones, fmt.Sprintf("canal%d", i)))
	}
	if f.OptedOut("otro") {
		t.Fatalf("OptedOut(otro) after %d channels = true", featMaxOptOut)
	}
	f.Apply(baja(daysAgo(2), BajaComunicaciones, "uno-mas"))
	if !f.OptedOut("otro") || len(f.OptOutChannels()) != 0 {
		t.Errorf("channel %d: OptedOut(otro) = %v, channels %v; want an opt-out from all", featMaxOptOut+1, f.OptedOut("otro"), f.OptOutChannels())
	}
}

func TestFeaturesClosure(t *testing.T) {
	tests := []struct {
		name       string
		evs        []*Event
		wantClosed bool
		wantTotal  float64 // tickets_total
	}{
		{"open", []*Event{buy(daysAgo(5), "T1", "a", 100, 10)}, false, 1},
		{"closed; later purchases ignored", []*Event{
			buy(daysAgo(20), "T1", "a", 100, 10), baja(daysAgo(10), BajaCuenta, ""), buy(daysAgo(5), "T2", "a", 100, 10),
		}, true, 1},
		{"late purchase before the closure counts", []*Event{
			baja(daysAgo(10), BajaCuenta, ""), buy(daysAgo(20), "T1", "a", 100, 10),
		}, true, 1},
		{"ALTA after the closure reopens", []*Event{
			baja(daysAgo(10), BajaCuenta, ""), alta(daysAgo(8), "web", ""), buy(daysAgo(5), "T2", "a", 100, 10),
		}, false, 1},
		{"purchase between closure and reopening is ignored", []*Event{
			baja(daysAgo(10), BajaCuenta, ""), alta(daysAgo(4), "web", ""), buy(daysAgo(5), "T2", "a", 100, 10),
		}, false, 0},
		{"ALTA before the closure does not reopen", []*Event{
			baja(daysAgo(10), BajaCuenta, ""), alta(daysAgo(12), "web", ""),
		}, true, 0},
		{"closed again", []*Event{
			baja(daysAgo(10), BajaCuenta, ""), alta(daysAgo(8), "web", ""), baja(daysAgo(2), BajaCuenta, ""),
		}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := applyAll(t, tt.evs...)
			v := values(t, f, featNow, "cuenta_cerrada", "tickets_total")
			got := []any{f.Closed(), v["cuenta_cerrada"], v["tickets_total"]}
			want := []any{tt.wantClosed, b2f(tt.wantClosed), tt.wantTotal}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Closed, cuenta_cerrada, tickets_total (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFeaturesAlta(t *testing.T) {
	f := applyAll(t,
		alta(daysAgo(100), "tienda", "nuevo"),
		&Event{Tipo: Alta, TS: daysAgo(10), Clave: "app", Perfil: "familia"}, // newest; no segmento
		alta(daysAgo(200), "web", "viejo"),                                   // late and older
	)
	got := []string{f.CanalAlta(), f.SegmentoDeclarado(), f.Perfil()}
	want := []string{"app", "nuevo", "familia"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CanalAlta, SegmentoDeclarado, Perfil (-want +got):\n%s", diff)
	}
	if v, _ := f.Get("antiguedad_dias", featNow); v != 200 {
		t.Errorf("antiguedad_dias = %v, want 200", v)
	}
	if last, ok := f.LastEvent(); !ok || !last.Equal(daysAgo(10)) || last.Location() != time.UTC {
		t.Errorf("LastEvent() = %v, %v; want %v, true", last, ok, daysAgo(10))
	}
	if _, ok := (&Features{}).LastEvent(); ok {
		t.Error("LastEvent() of a customer without history reported true")
	}
}

func TestFeaturesHorizon(t *testing.T) {
	f := applyAll(t,
		buy(daysAgo(800), "T0", "a", 10000, 1000),
		buy(daysAgo(400), "T1", "a", 10000, 1000),
		buy(daysAgo(400), "T1", "b", 10000, 1000),
		buy(daysAgo(10), "T2", "a", 10000, 1000),
	)
	// Only the last purchase is within 366 days of the newest event.
	if len(f.days) != 1 || len(f.tickets) != 1 {
		t.Errorf("after pruning: %d days, %d tickets; want 1, 1", len(f.days), len(f.tickets))
	}
	// A late event far back updates lifetime totals; its second category
	// is recognised as the same ticket.
	fl1 := f.Apply(buy(daysAgo(700), "T9", "a", 20000, 1000))
	fl2 := f.Apply(buy(daysAgo(700), "T9", "b", 20000, 1000))
	if want := FlagOutOfOrder | FlagBeyondHorizon; fl1 != want || fl2 != want {
		t.Errorf("flags of the late events = %v, %v; want %v", fl1, fl2, want)
	}
	got := values(t, f, featNow, "tickets_total", "gasto_total_mxn", "frecuencia_365d", "gasto_365d_mxn", "recencia_dias", "antiguedad_dias")
	want := map[string]float64{
		"tickets_total": 4, "gasto_total_mxn": 800, "frecuencia_365d": 1, "gasto_365d_mxn": 100,
		"recencia_dias": 10, "antiguedad_dias": 800,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
	if len(f.days) != 1 || len(f.tickets) != 1 {
		t.Errorf("late events beyond the horizon created buckets: %d days, %d tickets", len(f.days), len(f.tickets))
	}
}

func TestFeaturesBucketsStayBounded(t *testing.T) {
	f := &Features{}
	start := daysAgo(3 * 365)
	var buf []byte
	for d := 0; d <= 3*365; d++ {
		f.Apply(buy(start.AddDate(0, 0, d), fmt.Sprintf("T%d", d), fmt.Sprintf("cat%d", d%40), 10000, 1000))
	}
	if len(f.days) > featRetainDays+1 || len(f.tickets) > featRetainDays+1 || len(f.cats) > featMaxCats+1 {
		t.Errorf("daily buyer for 3 years: %d days, %d tickets, %d categories", len(f.days), len(f.tickets), len(f.cats))
	}
	buf = f.AppendEncode(buf[:0])
	if len(buf) > 12000 {
		t.Errorf("daily buyer for 3 years encodes to %d bytes", len(buf))
	}
	got := values(t, f, featNow, "frecuencia_30d", "frecuencia_365d", "tickets_total", "categorias_365d")
	want := map[string]float64{"frecuencia_30d": 30, "frecuencia_365d": 365, "tickets_total": 3*365 + 1, "categorias_365d": 33}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
}

func TestFeaturesCategories(t *testing.T) {
	tests := []struct {
		name string
		evs  []*Event
		want map[string]float64
	}{
		{"none", nil, map[string]float64{
			"categorias_365d": 0, "cuota_categoria_top": 0, "entropia_categorias": 0, "cuota_categoria:a": 0,
		}},
		{"one", []*Event{buy(daysAgo(3), "T1", "a", 100, 10)}, map[string]float64{
			"categorias_365d": 1, "cuota_categoria_top": 1, "entropia_categorias": 0, "cuota_categoria:a": 1, "cuota_categoria:b": 0,
		}},
		{"two even", []*Event{buy(daysAgo(3), "T1", "a", 100, 10), buy(daysAgo(40), "T2", "b", 100, 10)}, map[string]float64{
			"categorias_365d": 2, "cuota_categoria_top": 0.5, "entropia_categorias": 1, "cuota_categoria:a": 0.5,
		}},
		{"uneven", []*Event{buy(daysAgo(3), "T1", "a", 300, 10), buy(daysAgo(3), "T1", "b", 100, 10)}, map[string]float64{
			"categorias_365d": 2, "cuota_categoria_top": 0.75, "cuota_categoria:b": 0.25,
			"entropia_categorias": -(0.75*math.Log(0.75) + 0.25*math.Log(0.25)) / math.Log(2),
		}},
		{"zero amounts do not count", []*Event{buy(daysAgo(3), "T1", "a", 100, 10), buy(daysAgo(3), "T1", "b", 0, 0)}, map[string]float64{
			"categorias_365d": 1, "cuota_categoria_top": 1,
		}},
		{"current month and the 12 before it", []*Event{
			buy(time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC), "T1", "viejo", 100, 10),     // 2024-06: month now-12, in
			buy(time.Date(2024, 5, 31, 23, 0, 0, 0, time.UTC), "T0", "antiguo", 100, 10), // 2024-05: out
			buy(daysAgo(1), "T2", "nuevo", 100, 10),
		}, map[string]float64{
			"categorias_365d": 2, "cuota_categoria:viejo": 0.5, "cuota_categoria:antiguo": 0,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValues(t, applyAll(t, tt.evs...), featNow, tt.want)
		})
	}
}

func TestFeaturesCategoryOverflow(t *testing.T) {
	f := &Features{}
	for i := 0; i < featMaxCats+5; i++ {
		f.Apply(buy(daysAgo(3), "T1", fmt.Sprintf("cat%02d", i), 100, 10))
	}
	f.Apply(buy(daysAgo(2), "T2", "cat00", 3000, 10))
	got := values(t, f, featNow, "categorias_365d", "cuota_categoria:cat00", "cuota_categoria:cat31", "cuota_categoria:cat32", "cuota_categoria_top")
	total := float64(100*(featMaxCats+5) + 3000)
	want := map[string]float64{
		"categorias_365d":       featMaxCats + 1, // 32 named and the overflow bucket
		"cuota_categoria:cat00": 3100 / total,
		"cuota_categoria:cat31": 100 / total,
		"cuota_categoria:cat32": 0, // in the overflow bucket, which has no name
		"cuota_categoria_top":   3100 / total,
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
}

func TestFeaturesCategoryPrune(t *testing.T) {
	f := applyAll(t,
		buy(time.Date(2023, 1, 10, 0, 0, 0, 0, time.UTC), "T0", "viejo", 100, 10),
		buy(daysAgo(5), "T1", "nuevo", 100, 10),
	)
	want := []featCat{{name: "nuevo", spend: [featCatMonths]int64{100}}}
	if diff := cmp.Diff(want, f.cats, cmp.AllowUnexported(featCat{})); diff != "" {
		t.Errorf("categories after the months rolled (-want +got):\n%s", diff)
	}
}

func TestFeaturesEncodeRoundTrip(t *testing.T) {
	cases := map[string]*Features{
		"empty":  {},
		"year":   applyAll(t, yearOfWeeklyPurchases()...),
		"mixed":  applyAll(t, baja(daysAgo(1), BajaComunicaciones, "sms"), baja(daysAgo(2), BajaCuenta, ""), alta(daysAgo(3), "web", "vip"), buy(daysAgo(500), "T1", "a", 1, -1), buy(daysAgo(4), "T2", "b", 0, 0)),
		"optall": applyAll(t, baja(daysAgo(1), BajaComunicaciones, "")),
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			b := f.AppendEncode([]byte{0xAA})
			got, ok := DecodeFeatures(b[1:])
			if !ok {
				t.Fatalf("DecodeFeatures(%x) = false", b[1:])
			}
			if diff := cmp.Diff(f, &got, featCmpOpts()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			for _, cut := range []int{1, 2, len(b) / 2, len(b) - 2} {
				if cut >= 1 && cut < len(b)-1 {
					if _, ok := DecodeFeatures(b[1:cut]); ok {
						t.Errorf("DecodeFeatures of the first %d bytes = true", cut-1)
					}
				}
			}
		})
	}
	if _, ok := DecodeFeatures(nil); ok {
		t.Error("DecodeFeatures(nil) = true")
	}
	if _, ok := DecodeFeatures([]byte{2, 0}); ok {
		t.Error("DecodeFeatures of version 2 = true")
	}
}

func TestFeaturesDecodeReuse(t *testing.T) {
	encs := [][]byte{
		applyAll(t, yearOfWeeklyPurchases()...).AppendEncode(nil),
		applyAll(t, baja(daysAgo(1), BajaComunicaciones, "sms"), buy(daysAgo(4), "T2", "b", 100, 10)).AppendEncode(nil),
		(&Features{}).AppendEncode(nil),
		applyAll(t, yearOfWeeklyPurchases()[:40]...).AppendEncode(nil),
		{1, 0xFF}, // invalid
		applyAll(t, yearOfWeeklyPurchases()...).AppendEncode(nil),
	}
	var reused Features
	for i, b := range encs {
		fresh, okFresh := DecodeFeatures(b)
		okReused := reused.Decode(b)
		if okFresh != okReused {
			t.Fatalf("record %d: DecodeFeatures ok = %v, Decode ok = %v", i, okFresh, okReused)
		}
		if diff := cmp.Diff(&fresh, &reused, featCmpOpts()); diff != "" {
			t.Errorf("record %d: Decode into a used Features (-fresh +reused):\n%s", i, diff)
		}
	}
}

func FuzzDecodeFeatures(f *testing.F) {
	f.Add(applyAll(f, yearOfWeeklyPurchases()...).AppendEncode(nil))
	f.Add(applyAll(f, baja(daysAgo(1), BajaComunicaciones, "sms"), alta(daysAgo(3), "web", "vip"), buy(daysAgo(500), "T1", "a", 1, -1)).AppendEncode(nil))
	f.Add((&Features{}).AppendEncode(nil))
	names := append(FeatureNames(), "cuota_categoria:abarrotes")
	f.Fuzz(func(t *testing.T, b []byte) {
		ft, ok := reDecode(t, b, DecodeFeatures, featCmpOpts())
		if !ok {
			return
		}
		check := func(when string) {
			v := ft.Vector(featNow, nil)
			if len(v) != VectorDim {
				t.Fatalf("%s: len(Vector) = %d", when, len(v))
			}
			for i, x := range v {
				if math.IsNaN(x) || math.IsInf(x, 0) || x < -1.5 || x > 1.5 {
					t.Fatalf("%s: Vector[%d] (%s) = %v", when, i, vectorNames[i], x)
				}
			}
			for _, n := range names {
				if x, _ := ft.Get(n, featNow); math.IsNaN(x) || math.IsInf(x, 0) {
					t.Fatalf("%s: Get(%s) = %v", when, n, x)
				}
			}
		}
		check("decoded")
		reused := applyAll(t, yearOfWeeklyPurchases()...)
		if !reused.Decode(b) {
			t.Fatal("Decode into a used Features = false, DecodeFeatures = true")
		}
		if diff := cmp.Diff(ft, *reused, featCmpOpts()); diff != "" {
			t.Fatalf("Decode into a used Features (-fresh +reused):\n%s", diff)
		}
		ft.Apply(buy(featNow, "T-fuzz", "abarrotes", 1000, 100))
		ft.Apply(buy(featNow.AddDate(2, 0, 0), "T-fuzz2", "nueva", 1000, 100))
		ft.Apply(baja(featNow, BajaComunicaciones, "sms"))
		check("after Apply")
		if _, ok := DecodeFeatures(ft.AppendEncode(nil)); !ok {
			t.Fatal("encoding after Apply does not decode")
		}
	})
}

func TestVector(t *testing.T) {
	if got := len(VectorNames()); got != VectorDim {
		t.Fatalf("len(VectorNames()) = %d, want %d", got, VectorDim)
	}
	t.Run("new customer", func(t *testing.T) {
		got := (&Features{}).Vector(featNow, nil)
		want := make([]float64, VectorDim)
		want[0], want[1], want[2], want[18] = 1, 1, 1, 1 // sesgo, recencia, sin_compras, dias_desde_ultimo_cupon
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Vector (-want +got):\n%s", diff)
		}
	})
	t.Run("year of weekly purchases", func(t *testing.T) {
		f := applyAll(t, yearOfWeeklyPurchases()...)
		dst := make([]float64, 0, VectorDim)
		got := f.Vector(featNow, dst)
		if &got[0] != &dst[:1][0] {
			t.Error("Vector did not append into dst")
		}
		named := map[string]float64{}
		for i, n := range VectorNames() {
			named[n] = got[i]
			if got[i] < -1.5 || got[i] > 1.5 || math.IsNaN(got[i]) {
				t.Errorf("%s = %v, out of range", n, got[i])
			}
		}
		want := map[string]float64{
			"sesgo":               1,
			"recencia":            math.Log1p(7) / math.Log1p(1096), // last ticket a week ago
			"sin_compras":         0,
			"frecuencia_365d":     math.Log1p(52) / math.Log1p(365),
			"tasa_redencion_365d": 7.0 / 12, // the first coupon was received 366 days ago
			"antiguedad":          math.Log1p(395) / math.Log1p(1096),
		}
		for n, w := range want {
			if math.Abs(named[n]-w) > 1e-12 {
				t.Errorf("%s = %v, want %v", n, named[n], w)
			}
		}
		for _, n := range []string{"gasto_30d", "gasto_365d", "margen_365d", "ticket_promedio", "cuota_categoria_top", "entropia_categorias"} {
			if named[n] <= 0 || named[n] > 1 {
				t.Errorf("%s = %v, want in (0, 1]", n, named[n])
			}
		}
	})
}

func TestFeatureDocs(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	docs := FeatureDocs()
	seen := map[string]bool{}
	var names []string
	for _, d := range docs[:len(docs)-1] {
		if !snake.MatchString(d.Name) || d.Doc == "" || seen[d.Name] {
			t.Errorf("bad or repeated feature doc %+v", d)
		}
		seen[d.Name] = true
		names = append(names, d.Name)
		if _, ok := (&Features{}).Get(d.Name, featNow); !ok {
			t.Errorf("Get(%q) unknown", d.Name)
		}
	}
	for i, d := range featureDefs {
		if d.id != featID(i) {
			t.Errorf("featureDefs[%d] (%s) has id %d", i, d.name, d.id)
		}
	}
	if diff := cmp.Diff(names, FeatureNames()); diff != "" {
		t.Errorf("FeatureNames (-docs +names):\n%s", diff)
	}
	if last := docs[len(docs)-1].Name; last != "cuota_categoria:<clave>" {
		t.Errorf("last doc = %q", last)
	}
	for _, n := range []string{"recencia_dia", "", "cuota_categoria:", "Recencia_dias"} {
		if _, ok := (&Features{}).Get(n, featNow); ok {
			t.Errorf("Get(%q) ok, want unknown", n)
		}
	}
}

func TestFeaturesExport(t *testing.T) {
	f := applyAll(t, alta(daysAgo(30), "app", "vip"), buy(daysAgo(3), "T1", "a", 300, 10), buy(daysAgo(3), "T1", "b", 100, 10),
		baja(daysAgo(1), BajaComunicaciones, "SMS"))
	m := f.Export(featNow)
	got := map[string]any{
		"canal_alta": m["canal_alta"], "segmento_declarado": m["segmento_declarado"], "perfil": m["perfil"],
		"canales_baja": m["canales_baja"], "cuotas_categoria": m["cuotas_categoria"], "tickets_total": m["tickets_total"],
	}
	want := map[string]any{
		"canal_alta": "app", "segmento_declarado": "vip", "perfil": "",
		"canales_baja": []string{"sms"}, "cuotas_categoria": map[string]float64{"a": 0.75, "b": 0.25}, "tickets_total": 1.0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Export (-want +got):\n%s", diff)
	}
	if len(m) != len(FeatureNames())+5 {
		t.Errorf("Export has %d keys, want %d", len(m), len(FeatureNames())+5)
	}
}

func TestFeatMonthOf(t *testing.T) {
	for day := int32(-800000); day < 800000; day += 7 {
		tm := time.Unix(int64(day)*86400, 0).UTC()
		want := int32(tm.Year()*12 + int(tm.Month()) - 1)
		if got := featMonthOf(day); got != want {
			t.Fatalf("featMonthOf(%d) (%s) = %d, want %d", day, tm.Format(time.DateOnly), got, want)
		}
	}
}

func TestFeatDayOf(t *testing.T) {
	for _, tt := range []struct {
		t    time.Time
		want int32
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(86399, 999999999), 0},
		{time.Unix(86400, 0), 1},
		{time.Unix(-1, 0), -1},
		{time.Unix(-86400, 0), -1},
		{time.Unix(-86401, 0), -2},
		{time.Date(2025, 6, 15, 23, 0, 0, 0, time.FixedZone("CST", -6*3600)), int32(time.Date(2025, 6, 16, 0, 0, 0, 0, time.UTC).Unix() / 86400)},
	} {
		if got := featDayOf(featNanos(tt.t)); got != tt.want {
			t.Errorf("featDayOf(%v) = %d, want %d", tt.t, got, tt.want)
		}
	}
	if got := featNanos(time.Time{}); got != math.MinInt64 {
		t.Errorf("featNanos(zero) = %d, want saturation", got)
	}
}

func BenchmarkFeaturesDecodeVector(b *testing.B) {
	enc := applyAll(b, yearOfWeeklyPurchases()...).AppendEncode(nil)
	b.ReportMetric(float64(len(enc)), "bytes/record")
	dst := make([]float64, 0, VectorDim)
	b.ReportAllocs()
	for b.Loop() {
		f, ok := DecodeFeatures(enc)
		if !ok {
			b.Fatal("decode")
		}
		dst = f.Vector(featNow, dst[:0])
	}
}

func BenchmarkFeaturesDecodeVectorReuse(b *testing.B) {
	// As BenchmarkFeaturesDecodeVector, decoding into one Features (a batch).
	enc := applyAll(b, yearOfWeeklyPurchases()...).AppendEncode(nil)
	dst := make([]float64, 0, VectorDim)
	var f Features
	b.ReportAllocs()
	for b.Loop() {
		if !f.Decode(enc) {
			b.Fatal("decode")
		}
		dst = f.Vector(featNow, dst[:0])
	}
}

func BenchmarkFeaturesApply(b *testing.B) {
	// Apply + encode of one purchase category on a customer with a year of
	// weekly purchases who keeps buying 3 categories a week: buckets are
	// created and pruned as in production. Every 10 simulated years the
	// customer starts again from the stored year (outside the timer).
	enc := applyAll(b, yearOfWeeklyPurchases()...).AppendEncode(nil)
	f, _ := DecodeFeatures(enc)
	buf := make([]byte, 0, 4096)
	cats := []string{"abarrotes", "lacteos", "bebidas"}
	tickets := make([]string, 520)
	for j := range tickets {
		tickets[j] = fmt.Sprintf("N%04d", j)
	}
	e := *buy(featNow, "", "", 12345, 2345)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == 3*len(tickets) {
			b.StopTimer()
			f, _ = DecodeFeatures(enc)
			i = 0
			b.StartTimer()
		}
		w := i / 3
		e.TS = featNow.Add(time.Duration(w) * 7 * 24 * time.Hour)
		e.TicketID, e.Clave = tickets[w], cats[i%3]
		f.Apply(&e)
		buf = f.AppendEncode(buf[:0])
		i++
	}
}

func BenchmarkFeaturesIngest(b *testing.B) {
	// The whole ingestion step: decode the stored record, apply one event,
	// encode it again.
	enc := applyAll(b, yearOfWeeklyPurchases()...).AppendEncode(nil)
	e := buy(featNow.Add(time.Hour), "T-new", "abarrotes", 12345, 2345)
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		f, ok := DecodeFeatures(enc)
		if !ok {
			b.Fatal("decode")
		}
		f.Apply(e)
		buf = f.AppendEncode(buf[:0])
	}
}
