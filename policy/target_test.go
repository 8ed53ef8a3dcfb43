package policy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTarget(t *testing.T) {
	off := DefaultConfig()
	off.TicketTarget = false
	// A window with two tickets, 900 cents of margin net of a 100-cent
	// discount, a 50-cent sending cost: reward 850. The customer's margin
	// per ticket was 400 over 4 tickets.
	full := Outcome{Reward: 850, MarginCents: 900, DiscountCents: 100, Tickets: 2, TicketMargin: 400, HistTickets: 4, Full: true}
	// A tenant whose windows showed 100 tickets of 200 cents each, whose
	// margin per ticket weighs 4 tickets against a customer's own.
	k4 := DefaultConfig()
	k4.TicketPseudo = 4
	tallied := New(k4)
	for range 100 {
		tallied.TallyTickets(Outcome{MarginCents: 150, DiscountCents: 50, Tickets: 1, Full: true})
	}
	tallied.TallyTickets(Outcome{MarginCents: 1e6, Tickets: 1}) // not Full: not tallied
	for _, tc := range []struct {
		name string
		m    *Model
		o    Outcome
		want float64
	}{
		{"tickets × margin per ticket − discount − cost", New(DefaultConfig()), full, 2*400 - 100 - 50},
		{"shrunk to the tenant's margin per ticket (4 of 4+4 tickets)", tallied, full, 2*300 - 100 - 50},
		{"no purchase: − cost", tallied, Outcome{Reward: -50, TicketMargin: 400, Full: true}, -50},
		{"switched off: the reward", New(off), full, 850},
		{"incomplete window: the reward", tallied, Outcome{Reward: 850, MarginCents: 900, Tickets: 2, TicketMargin: 400}, 850},
		{"unknown margin per ticket: the reward", tallied, Outcome{Reward: 850, MarginCents: 900, DiscountCents: 100, Tickets: 2, Full: true}, 850},
	} {
		if got := tc.m.Target(tc.o); got != tc.want {
			t.Errorf("%s: Target = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The tally survives the stored form.
	back := roundTrip(t, tallied, k4)
	g0, ok0 := tallied.TicketMean()
	g1, ok1 := back.TicketMean()
	if d := cmp.Diff([]any{200.0, true}, []any{g1, ok1}); d != "" || g0 != g1 || ok0 != ok1 {
		t.Errorf("TicketMean after a round trip (-want +got):\n%s", d)
	}
}

// TestOptoutRate: the tenant's opt-out rate per send starts at its prior
// (1 in 50), reads the tallied sends as they come (windows without a send
// add nothing) and survives the stored form; a stored count that cannot
// be (more opt-outs than sends) is damage.
func TestOptoutRate(t *testing.T) {
	m := New(DefaultConfig())
	if got := m.OptoutRate(); got != 0.02 {
		t.Errorf("no sends: OptoutRate = %v, want the prior's 0.02", got)
	}
	for i := range 950 {
		m.TallyOptouts(Outcome{Sent: true, OptOut: i%10 == 0})
		m.TallyOptouts(Outcome{OptOut: true}) // nothing sent: not a send's opt-out
	}
	want := (95.0 + 1) / (950 + 50)
	back := roundTrip(t, m, DefaultConfig())
	if d := cmp.Diff([]float64{want, want}, []float64{m.OptoutRate(), back.OptoutRate()}); d != "" {
		t.Errorf("OptoutRate after 95 opt-outs in 950 sends, before and after a round trip (-want +got):\n%s", d)
	}
	b, err := m.Marshal("v1")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), `"optouts":95`, `"optouts":951`, 1)
	if bad == string(b) {
		t.Fatal("no optouts in the stored model")
	}
	if _, _, err := Unmarshal([]byte(bad), DefaultConfig()); err == nil {
		t.Error("a stored model with more opt-outs than sends loads")
	}
}
