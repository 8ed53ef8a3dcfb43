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

// TestReplayBesideAnotherRetry: a keyed repeat of an answered request is
// answered with the stored answer even while another request with the key
// runs (a retry beside another retry), for a decision, a confirmation and
// a fallback record: 409 idempotencia_conflicto is for another body or a
// key whose first request still runs (contract §2). A key not yet
// answered, held by a request, stays ErrIdempotencyInFlight.
func TestReplayBesideAnotherRetry(t *testing.T) {
	e, _ := newTestEngine(t, 2, nil)
	dec := func(key string) Request {
		return Request{ClienteRef: "idem-ana", Canal: "push", Idempotency: Idempotency{Key: key, BodyHash: HashBody([]byte("d"))}}
	}
	first, err := e.Decide("acme", dec("k-dec"))
	if err != nil {
		t.Fatal(err)
	}
	conf := Confirmation{Ejecutada: true, Idempotency: Idempotency{Key: "k-conf", BodyHash: HashConfirmBody(first.DecisionID, []byte("c"))}}
	if _, err := e.Confirm("acme", first.DecisionID, conf); err != nil {
		t.Fatal(err)
	}
	fb := FallbackInput{Accion: 1, Canal: "push", ClienteRef: "idem-bea", Idempotency: Idempotency{Key: "k-fb", BodyHash: HashFallbackBody([]byte("f"))}}
	if err := e.Fallback("acme", fb); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k-dec", "k-conf", "k-fb", "k-new"} {
		release, err := e.flights.claimKey("acme", key) // another retry runs
		if err != nil {
			t.Fatal(err)
		}
		defer release()
	}
	type result struct {
		Answer string
		Err    error
	}
	got := map[string]result{}
	if d, err := e.Decide("acme", dec("k-dec")); err != nil {
		got["decision"] = result{Err: err}
	} else {
		got["decision"] = result{Answer: d.DecisionID}
	}
	estado, err := e.Confirm("acme", first.DecisionID, conf)
	got["confirmation"] = result{estado, err}
	got["fallback"] = result{Err: e.Fallback("acme", fb)}
	_, err = e.Decide("acme", dec("k-new"))
	got["new key"] = result{Err: err}
	want := map[string]result{
		"decision": {Answer: first.DecisionID}, "confirmation": {Answer: EstadoEjecutada}, "fallback": {},
		"new key": {Err: ErrIdempotencyInFlight},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) })); diff != "" {
		t.Errorf("keyed requests while their key is held (-want +got):\n%s", diff)
	}
}
