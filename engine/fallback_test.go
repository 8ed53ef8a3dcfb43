package engine

import (
	"errors"
	"testing"

	"github.com/coupond/coupond/store"
)

// storedRecords returns tenant's decision records as stored.
func storedRecords(t *testing.T, db *store.DB, tenant string) []DecisionRecord {
	t.Helper()
	var out []DecisionRecord
	lo, hi := store.DecisionSpan(tenant)
	if err := db.Scan(lo, hi, func(_, v []byte) error {
		var r DecisionRecord
		if err := unmarshalRecord(v, &r); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// fallbackRecords counts tenant's stored fallback records.
func fallbackRecords(t *testing.T, e *Engine, tenant string) int {
	t.Helper()
	n := 0
	for _, r := range storedRecords(t, e.db, tenant) {
		if r.EnRespaldo {
			n++
		}
	}
	return n
}

// TestFallbackIdempotencyKey: a fallback record sent again with its
// Idempotency-Key (a client's retry after a lost answer) is stored once;
// the same key with another body is ErrIdempotencyConflict; without a key
// every call is a record. Without keys a client's retries stored a second
// record with propensity 1, which the evaluation then counted twice.
func TestFallbackIdempotencyKey(t *testing.T) {
	e, _ := newTestEngine(t, 3, nil)
	in := FallbackInput{Accion: 1, Canal: "push", ClienteRef: "fallback01",
		IdempotencyKey: "k-1", BodyHash: HashFallbackBody([]byte(`{"a":1}`))}
	for i := 0; i < 2; i++ {
		if err := e.Fallback("acme", in); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if n := fallbackRecords(t, e, "acme"); n != 1 {
		t.Errorf("after a keyed fallback sent twice: %d records, want 1", n)
	}
	other := in
	other.BodyHash = HashFallbackBody([]byte(`{"a":2}`))
	if err := e.Fallback("acme", other); !errors.Is(err, ErrIdempotencyConflict) {
		t.Errorf("same key, another body: %v, want ErrIdempotencyConflict", err)
	}
	plain := FallbackInput{Accion: 1, Canal: "push", ClienteRef: "fallback01"}
	for i := 0; i < 2; i++ {
		if err := e.Fallback("acme", plain); err != nil {
			t.Fatal(err)
		}
	}
	if n := fallbackRecords(t, e, "acme"); n != 3 {
		t.Errorf("after two calls without a key: %d records, want 3", n)
	}
}

// TestFallbackKeyIsNotADecisionKey: a key first used for a fallback record
// is a conflict for a decision request, not a replay of the fallback's
// empty answer as a decision.
func TestFallbackKeyIsNotADecisionKey(t *testing.T) {
	e, _ := newTestEngine(t, 3, nil)
	body := []byte(`{"cliente_ref":"fallback01"}`)
	if err := e.Fallback("acme", FallbackInput{Accion: 0, Canal: "push", ClienteRef: "fallback01",
		IdempotencyKey: "k-2", BodyHash: HashFallbackBody(body)}); err != nil {
		t.Fatal(err)
	}
	_, err := e.Decide("acme", Request{ClienteRef: "fallback01", Canal: "push", IdempotencyKey: "k-2", BodyHash: HashBody(body)})
	if !errors.Is(err, ErrIdempotencyConflict) {
		t.Errorf("decision with a fallback's key: %v, want ErrIdempotencyConflict", err)
	}
}
