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

// idemLayout is an idempotency record in the layout every release stored:
// "h" (the canonical body hash as 32 numbers), "at", "answer" and
// "cliente_ref", in that order.
func idemLayout(hash [32]byte, at time.Time, answer, ref string) string {
	nums := make([]int, len(hash))
	for i, b := range hash {
		nums[i] = int(b)
	}
	h, _ := json.Marshal(nums)
	return fmt.Sprintf(`{"h":%s,"at":%q,"answer":%s,"cliente_ref":%q}`, h, at.Format(time.RFC3339Nano), answer, ref)
}

// TestIdempotencyRecordBytes: the record a keyed decision, fallback record
// and confirmation store is idemLayout byte for byte (records of the
// release before must replay after an upgrade, and the other way round),
// and a record written in that layout by hand replays for the same body,
// by its canonical or its raw hash, and is a conflict for another.
func TestIdempotencyRecordBytes(t *testing.T) {
	e, db := newTestEngine(t, 2, nil)
	d, err := e.Decide("acme", Request{ClienteRef: "idem-ana", Canal: "push",
		Idempotency: Idempotency{Key: "k-dec", BodyHash: HashBody([]byte("d")), RawBodyHash: HashBody([]byte("raw"))}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Fallback("acme", FallbackInput{Accion: 1, Canal: "push", ClienteRef: "idem-bea",
		Idempotency: Idempotency{Key: "k-fb", BodyHash: HashFallbackBody([]byte("f"))}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Confirm("acme", d.DecisionID, Confirmation{Ejecutada: true,
		Idempotency: Idempotency{Key: "k-conf", BodyHash: HashConfirmBody(d.DecisionID, []byte("c"))}}); err != nil {
		t.Fatal(err)
	}
	answer, _ := d.AppendJSON(nil)
	got := map[string]string{}
	for _, key := range []string{"k-dec", "k-fb", "k-conf"} {
		raw, err := db.Idempotency("acme", key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		got[key] = string(raw)
	}
	want := map[string]string{
		"k-dec":  idemLayout(HashBody([]byte("d")), t0, string(answer), "idem-ana"),
		"k-fb":   idemLayout(HashFallbackBody([]byte("f")), t0, `{}`, "idem-bea"),
		"k-conf": idemLayout(HashConfirmBody(d.DecisionID, []byte("c")), t0, fmt.Sprintf(`{"decision_id":%q,"estado_ejecucion":"ejecutada"}`, d.DecisionID), "idem-ana"),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored records (-want +got):\n%s", diff)
	}

	damage(t, db, store.IdempotencyKey("acme", "k-old"), idemLayout(HashBody([]byte("old")), t0, string(answer), "idem-ana"))
	for _, tc := range []struct {
		name string
		id   Idempotency
		want error
	}{
		{"canonical hash", Idempotency{Key: "k-old", BodyHash: HashBody([]byte("old"))}, nil},
		{"raw hash", Idempotency{Key: "k-old", BodyHash: HashBody([]byte("new")), RawBodyHash: HashBody([]byte("old"))}, nil},
		{"another body", Idempotency{Key: "k-old", BodyHash: HashBody([]byte("new"))}, ErrIdempotencyConflict},
	} {
		r, err := e.Decide("acme", Request{ClienteRef: "idem-ana", Canal: "push", Idempotency: tc.id})
		if !errors.Is(err, tc.want) || err == nil && r.DecisionID != d.DecisionID {
			t.Errorf("%s: %v %v, want %v and the stored decision", tc.name, r, err, tc.want)
		}
	}
}
