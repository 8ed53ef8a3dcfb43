package engine

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"time"

	"github.com/coupond/coupond/store"
)

// Idempotency is a request's idempotency identity, the one type decision
// requests, fallback records, confirmations and batch creations (through
// KeyClaim) carry it in. With Key set (the Idempotency-Key, the tenant's:
// the four routes share its keys), a repeat within IdempotencyTTL whose
// body matches the stored record's is the same request, answered from the
// record and storing nothing more; another body is ErrIdempotencyConflict.
// The zero value has no key. Each route hashes its bodies its own way
// (HashBody, HashFallbackBody, HashConfirmBody, HashBatchBody), so a key
// never replays across routes.
type Idempotency struct {
	Key string
	// BodyHash is the route's hash of the body's canonical JSON, the hash
	// a record is stored with.
	BodyHash [32]byte
	// RawBodyHash, optional, is the same hash of the body's bytes as sent:
	// the identity records stored before BodyHash was taken over the
	// canonical body hold (they live IdempotencyTTL), so a repeat across
	// that upgrade still replays. A record matching either hash is the
	// same request.
	RawBodyHash [32]byte
}

// Keyed reports whether the request carries an Idempotency-Key.
func (id Idempotency) Keyed() bool { return id.Key != "" }

// sameBody reports whether a record stored with body hash h answered this
// request's body.
func (id Idempotency) sameBody(h [32]byte) bool { return h == id.BodyHash || h == id.RawBodyHash }

// record is the stored record of this request's key answered with answer
// at now, for customer clienteRef (so a deletion of the customer finds it).
// Its bytes are idemRecord's JSON, the layout every release stored.
func (id Idempotency) record(now time.Time, answer json.RawMessage, clienteRef string) ([]byte, error) {
	return json.Marshal(idemRecord{BodyHash: id.BodyHash, At: now, Answer: answer, ClienteRef: clienteRef})
}

// idemRecord is the stored record of an Idempotency-Key (store's
// idempotency table); its JSON is the layout every release stored and
// read (TestIdempotencyRecordBytes), so keep its fields and tags.
type idemRecord struct {
	BodyHash [32]byte        `json:"h"`
	At       time.Time       `json:"at"`
	Answer   json.RawMessage `json:"answer"`
	// ClienteRef lets a customer's deletion find the records that answered
	// for them (engine/privacy.go).
	ClienteRef string `json:"cliente_ref,omitempty"`
}

// HashBatchBody is the identity of a batch request's body for
// idempotency: the SHA-256 of the route's prefix and the bytes body writes
// (the body as sent, or its canonical JSON streamed, so a body of up to
// 96 MB is hashed without a copy). It differs from HashBody's for the same
// bytes, so a key used for a decision never replays as a batch.
func HashBatchBody(body io.WriterTo) [32]byte {
	h := sha256.New()
	h.Write([]byte("lotes-decision\x00"))
	body.WriteTo(h) // a hash.Hash never fails a write
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// KeyClaims hands the routes the engine does not answer itself (batch
// creation) the tenant's Idempotency-Keys, shared with the decision routes
// (Engine.KeyClaims).
type KeyClaims struct {
	core    *core
	flights *keyFlights
}

// KeyClaim is a keyed request of a route the engine does not answer
// itself holding its Idempotency-Key: no other request with the key, of
// any route, runs until Release. Obtain it with KeyClaims.Claim.
type KeyClaim struct {
	core    *core
	id      Idempotency
	tenant  string
	now     time.Time
	release func()
	answer  json.RawMessage
}

// Claim claims tenant's Idempotency-Key of id at now (the
// tenant's clock) and looks its record up: ErrIdempotencyInFlight while
// another request with the key runs, ErrIdempotencyConflict when its record within
// IdempotencyTTL answered another body; otherwise a claim whose Answer is
// the stored answer of a replay (nil for a new, expired or damaged key,
// see idemRecord). For an unkeyed id the claim holds nothing. The caller
// must call Release once its answer is committed.
func (k *KeyClaims) Claim(tenant string, now time.Time, id Idempotency) (*KeyClaim, error) {
	c := &KeyClaim{core: k.core, id: id, tenant: tenant, now: now, release: func() {}}
	if !id.Keyed() {
		return c, nil
	}
	release, err := k.flights.claimKey(tenant, id.Key)
	if err != nil {
		return nil, err
	}
	rec, _, err := k.core.idemRecord(tenant, now, id)
	if err != nil {
		release()
		return nil, err
	}
	c.release = release
	if rec != nil {
		c.answer = rec.Answer
	}
	return c, nil
}

// Stored is the answer stored for tenant's Idempotency-Key of id within
// IdempotencyTTL by now, looked up without claiming the key, so that a
// retry of an answered request beside another retry of it is a replay, not
// a conflict (contract §2 keeps that for another body or a first request
// still running; Decide does the same): nil when the key has no readable
// record (new, expired or damaged: Claim then claims it and deals with
// them), ErrIdempotencyConflict when the record answered another body.
// An unkeyed id has none.
func (k *KeyClaims) Stored(tenant string, now time.Time, id Idempotency) (json.RawMessage, error) {
	if !id.Keyed() {
		return nil, nil
	}
	rec, _, err := k.core.idemLookup(tenant, now, id, false)
	if rec == nil || err != nil {
		return nil, err
	}
	return rec.Answer, nil
}

// Answer is the answer stored for the claimed key: the first request's,
// to be sent again as it is; nil when the request is not a replay.
func (c *KeyClaim) Answer() json.RawMessage { return c.answer }

// Damaged moves the claimed key's record, whose stored answer the route
// cannot read (cause), to quarantine and reads it as absent, as Claim
// reads a record that does not decode: the request is answered afresh.
func (c *KeyClaim) Damaged(cause error) {
	c.answer = nil
	raw, err := c.core.db.Idempotency(c.tenant, c.id.Key)
	if err != nil {
		return
	}
	c.core.quarantine(c.tenant, store.IdempotencyKey(c.tenant, c.id.Key), raw, cause)
}

// Put writes in b the key's record answering answer, which must name no
// customer (it is not found by a customer's deletion: its body is kept as
// hashes only); nothing for an unkeyed claim. Commit b before Release.
func (c *KeyClaim) Put(b *store.Batch, answer json.RawMessage) error {
	if !c.id.Keyed() {
		return nil
	}
	rec, err := c.id.record(c.now, answer, "")
	if err != nil {
		return err
	}
	b.SetIdempotency(c.tenant, c.id.Key, rec)
	return nil
}

// Release ends the claim; another request with the key may then run.
func (c *KeyClaim) Release() { c.release() }
