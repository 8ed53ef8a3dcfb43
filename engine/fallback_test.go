package engine

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

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
		Idempotency: Idempotency{Key: "k-1", BodyHash: HashFallbackBody([]byte(`{"a":1}`))}}
	for i := 0; i < 2; i++ {
		if err := e.Fallback("acme", in); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if n := fallbackRecords(t, e, "acme"); n != 1 {
		t.Errorf("after a keyed fallback sent twice: %d records, want 1", n)
	}
	other := in
	other.Idempotency.BodyHash = HashFallbackBody([]byte(`{"a":2}`))
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
		Idempotency: Idempotency{Key: "k-2", BodyHash: HashFallbackBody(body)}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.Decide("acme", Request{ClienteRef: "fallback01", Canal: "push", Idempotency: Idempotency{Key: "k-2", BodyHash: HashBody(body)}})
	if !errors.Is(err, ErrIdempotencyConflict) {
		t.Errorf("decision with a fallback's key: %v, want ErrIdempotencyConflict", err)
	}
}

// TestIdempotencyRawBodyHash: a record stored with the hash of a body's
// bytes (as releases before canonical body hashing stored it) still
// replays for a repeat that carries that hash as RawBodyHash beside its
// canonical BodyHash, for decisions and fallback records alike; a repeat
// matching neither is a conflict.
func TestIdempotencyRawBodyHash(t *testing.T) {
	e, _ := newTestEngine(t, 3, nil)
	raw, canon, other := []byte(`{ "b":1, "a":2 }`), []byte(`{"a":2,"b":1}`), []byte(`{"a":3}`)
	first, err := e.Decide("acme", Request{ClienteRef: "rawhash01", Canal: "push", CapExempt: true, Idempotency: Idempotency{Key: "k-d", BodyHash: HashBody(raw)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		hash, raw []byte
		want      error
	}{
		{"canonical with the stored raw hash", canon, raw, nil},
		{"canonical alone", canon, nil, ErrIdempotencyConflict},
		{"other body", other, other, ErrIdempotencyConflict},
	} {
		req := Request{ClienteRef: "rawhash01", Canal: "push", CapExempt: true, Idempotency: Idempotency{Key: "k-d", BodyHash: HashBody(tc.hash)}}
		in := FallbackInput{Accion: 1, Canal: "push", ClienteRef: "rawhash02", Idempotency: Idempotency{Key: "k-f", BodyHash: HashFallbackBody(tc.hash)}}
		if tc.raw != nil {
			req.Idempotency.RawBodyHash, in.Idempotency.RawBodyHash = HashBody(tc.raw), HashFallbackBody(tc.raw)
		}
		d, err := e.Decide("acme", req)
		if !errors.Is(err, tc.want) || err == nil && d.DecisionID != first.DecisionID {
			t.Errorf("decision, %s: %v %v, want %v and the first decision", tc.name, d, err, tc.want)
		}
		if tc.name == "canonical with the stored raw hash" {
			if err := e.Fallback("acme", FallbackInput{Accion: 1, Canal: "push", ClienteRef: "rawhash02", Idempotency: Idempotency{Key: "k-f", BodyHash: HashFallbackBody(raw)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Fallback("acme", in); !errors.Is(err, tc.want) {
			t.Errorf("fallback, %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if n := fallbackRecords(t, e, "acme"); n != 1 {
		t.Errorf("%d fallback records, want 1", n)
	}
}

// TestFallbackReplayAfterCatalogChange: a keyed fallback record repeated
// after its action left the catalog (a client's retry whose first answer
// was lost) is answered as the first call was and stores nothing more; the
// same action without a key, or under a new key, is another record of a
// coupon an earlier catalog held, stored (TestFallbackRetiredCouponBudget);
// an action no catalog held is ErrUnknownAction. Before, the catalog was
// checked ahead of the replay and the retry got a 422 for a record already
// stored, as a confirmation's accion_real does not.
func TestFallbackReplayAfterCatalogChange(t *testing.T) {
	e, _ := newTestEngine(t, 3, nil)
	in := FallbackInput{Accion: 3, Canal: "push", ClienteRef: "fallback01",
		Idempotency: Idempotency{Key: "k-3", BodyHash: HashFallbackBody([]byte(`{"accion":3}`))}}
	if err := e.Fallback("acme", in); err != nil {
		t.Fatal(err)
	}
	cat, err := e.Campaigns.Catalog("acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Campaigns.ReplaceCatalog("acme", cat.Acciones[:2], t0); err != nil {
		t.Fatal(err)
	}
	newKey := in
	newKey.Idempotency.Key = "k-4"
	plain := in
	plain.Idempotency = Idempotency{}
	never := plain
	never.Accion = 9
	tests := []struct {
		name string
		in   FallbackInput
		want error
	}{
		{"same key and body", in, nil},
		{"new key", newKey, nil},
		{"no key", plain, nil},
		{"an action no catalog held", never, ErrUnknownAction},
	}
	for _, tt := range tests {
		if err := e.Fallback("acme", tt.in); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if diff := cmp.Diff(3, fallbackRecords(t, e, "acme")); diff != "" {
		t.Errorf("fallback records (-want +got):\n%s", diff)
	}
}
