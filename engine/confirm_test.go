package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestConfirmIdempotencyKey: a confirmation sent again with its
// Idempotency-Key (a client's retry after the answer of a stored
// confirmation was lost) answers the stored estado and stores nothing
// more: one confirmation counted, the record's confirmada_en the first's.
// The same key with another body, for another decision, first used for a
// decision or still in flight is ErrIdempotencyConflict; without a key, or
// with another one, and once the key is 24 hours old by the tenant clock,
// a second confirmation is ErrAlreadyConfirmed. Without keys the retry was
// ErrAlreadyConfirmed, which the caller could not tell from someone else's
// confirmation.
func TestConfirmIdempotencyKey(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	var ids []string
	for i := range 3 {
		req := Request{ClienteRef: fmt.Sprintf("confirm%02d", i), Canal: "push"}
		if i == 2 {
			req.Idempotency = Idempotency{Key: "decision-key", BodyHash: HashBody([]byte("{}"))}
		}
		d, err := e.Decide("acme", req)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.DecisionID)
	}
	yes := []byte(`{"ejecutada":true}`)
	keyed := func(id, key string, body []byte, c Confirmation) Confirmation {
		c.Idempotency = Idempotency{Key: key, BodyHash: HashConfirmBody(id, body)}
		return c
	}
	first := keyed(ids[0], "c-1", yes, Confirmation{Ejecutada: true})
	confirmedAt := t0
	for i := range 3 {
		if estado, err := e.Confirm("acme", ids[0], first); estado != EstadoEjecutada || err != nil {
			t.Fatalf("keyed confirmation %d: %q, %v; want %q", i+1, estado, err, EstadoEjecutada)
		}
		advance(t, db, time.Hour)
	}
	nonce, _ := e.ids.parse("acme", ids[0])
	r, err := e.loadDecision("acme", nonce)
	if err != nil {
		t.Fatal(err)
	}
	if r.ConfirmadaEn == nil || !r.ConfirmadaEn.Equal(confirmedAt) {
		t.Errorf("confirmada_en after three keyed confirmations: %v, want the first's %v", r.ConfirmadaEn, confirmedAt)
	}
	hours, err := e.Counters().Hours("acme", HourOf(t0), HourOf(t0))
	if err != nil {
		t.Fatal(err)
	}
	if n := hours[0][CountConfirmed]; n != 1 {
		t.Errorf("confirmations counted after three keyed confirmations: %d, want 1", n)
	}
	tests := []struct {
		name string
		id   string
		c    Confirmation
		want error
	}{
		{"same key, another body", ids[0], keyed(ids[0], "c-1", []byte(`{"ejecutada":false}`), Confirmation{}), ErrIdempotencyConflict},
		{"same key and body, another decision", ids[1], keyed(ids[1], "c-1", yes, Confirmation{Ejecutada: true}), ErrIdempotencyConflict},
		{"a decision's key", ids[1], keyed(ids[1], "decision-key", []byte("{}"), Confirmation{Ejecutada: true}), ErrIdempotencyConflict},
		{"another key", ids[0], keyed(ids[0], "c-2", yes, Confirmation{Ejecutada: true}), ErrAlreadyConfirmed},
		{"no key", ids[0], Confirmation{Ejecutada: true}, ErrAlreadyConfirmed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := e.Confirm("acme", tt.id, tt.c); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	release, err := e.flights.claimKey("acme", "c-3")
	if err != nil {
		t.Fatal(err)
	}
	third := keyed(ids[1], "c-3", yes, Confirmation{Ejecutada: true})
	if _, err := e.Confirm("acme", ids[1], third); !errors.Is(err, ErrIdempotencyConflict) {
		t.Errorf("key in flight: %v, want ErrIdempotencyConflict", err)
	}
	release()
	if estado, err := e.Confirm("acme", ids[1], third); estado != EstadoEjecutada || err != nil {
		t.Errorf("key no longer in flight: %q, %v", estado, err)
	}
	advance(t, db, IdempotencyTTL)
	if _, err := e.Confirm("acme", ids[0], first); !errors.Is(err, ErrAlreadyConfirmed) {
		t.Errorf("key older than 24 h: %v, want ErrAlreadyConfirmed", err)
	}
}

// TestConfirmIdempotencyRejectedOnce: a rejected campaign send confirmed
// again with its key answers rechazada again and gives its budget back
// once.
func TestConfirmIdempotencyRejectedOnce(t *testing.T) {
	e, db := newTestEngine(t, 1, nil)
	ids := campaignSends(t, e, 2, 2)
	no := Confirmation{Ejecutada: false, MotivoRechazo: "sin stock", Idempotency: Idempotency{Key: "r-1",
		BodyHash: HashConfirmBody(ids[0], []byte(`{"ejecutada":false,"motivo_rechazo":"sin stock"}`))}}
	var got []string
	for range 2 {
		estado, err := e.Confirm("acme", ids[0], no)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, estado)
	}
	if diff := cmp.Diff([]string{EstadoRechazada, EstadoRechazada}, got); diff != "" {
		t.Errorf("keyed rejection sent twice (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(budget{Envios: 1, DescuentoCents: 1000}, storedBudget(t, db)); diff != "" {
		t.Errorf("budget after a rejection replayed (-want +got):\n%s", diff)
	}
}

// TestDamagedConfirmIdempotencyRecord: a confirmation's Idempotency-Key
// whose record does not decode, or holds no confirmation answer, is moved
// to quarantine and read as absent: the repeat is answered afresh
// (ErrAlreadyConfirmed, the decision is confirmed), never with an error
// that stops it.
func TestDamagedConfirmIdempotencyRecord(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"record", ""},
		{"estado of another type", `{"estado_ejecucion":5}`},
		{"unknown estado", `{"estado_ejecucion":"pendiente"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 2, nil)
			d, err := e.Decide("acme", Request{ClienteRef: "idem-beto", Canal: "push"})
			if err != nil {
				t.Fatal(err)
			}
			c := Confirmation{Ejecutada: true, Idempotency: Idempotency{Key: "k-1", BodyHash: HashConfirmBody(d.DecisionID, []byte("b"))}}
			if _, err := e.Confirm("acme", d.DecisionID, c); err != nil {
				t.Fatal(err)
			}
			stored := `{"h":"not a hash"`
			if tc.answer != "" {
				raw, err := json.Marshal(idemRecord{BodyHash: c.Idempotency.BodyHash, At: t0, Answer: json.RawMessage(tc.answer)})
				if err != nil {
					t.Fatal(err)
				}
				stored = string(raw)
			}
			damage(t, db, store.IdempotencyKey("acme", "k-1"), stored)
			if _, err := e.Confirm("acme", d.DecisionID, c); !errors.Is(err, ErrAlreadyConfirmed) {
				t.Errorf("repeat over a damaged record: %v, want ErrAlreadyConfirmed", err)
			}
			if diff := cmp.Diff([]string{"idempotency"}, quarantinedTables(t, e)); diff != "" {
				t.Errorf("quarantine (-want +got):\n%s", diff)
			}
		})
	}
}
