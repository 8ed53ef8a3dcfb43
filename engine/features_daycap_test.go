package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestFeaturesDayTicketsBounded: a cliente_ref used for every walk-in sale
// of a store (thousands of tickets a day) keeps at most featMaxDayTickets
// tickets a day, so its record stays small; every ticket still counts in
// the lifetime total, and a ticket kept still gathers its lines.
func TestFeaturesDayTicketsBounded(t *testing.T) {
	var f Features
	const days, perDay = 30, 500
	for d := range days {
		for k := range perDay {
			ts := t0.Add(time.Duration(d)*24*time.Hour + time.Duration(k)*time.Second)
			for _, cat := range []string{"abarrotes", "bebidas"} { // two lines a ticket
				f.Apply(&Event{ID: "x", ClienteRef: "MOSTRADOR", TS: ts, Tipo: CompraCat, Clave: cat, ValorCents: 1000, TicketID: fmt.Sprintf("t-%d-%d", d, k)})
			}
		}
	}
	if got, want := len(f.tickets), days*featMaxDayTickets; got != want {
		t.Errorf("kept %d tickets, want %d (%d a day)", got, want, featMaxDayTickets)
	}
	if n := len(f.AppendEncode(nil)); n > 40<<10 {
		t.Errorf("record of %d bytes, want under 40 KiB", n)
	}
	// Kept tickets count once; each line of one beyond the cap counts.
	if got, want := f.ticketsTotal, int64(days*(featMaxDayTickets+2*(perDay-featMaxDayTickets))); got != want {
		t.Errorf("ticketsTotal %d, want %d", got, want)
	}
	for _, tk := range f.tickets {
		if tk.valor != 2000 {
			t.Fatalf("kept ticket %+v: valor %d, want both lines (2000)", tk, tk.valor)
		}
	}
}
