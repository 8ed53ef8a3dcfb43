package engine

import (
	"encoding/json"
	"time"
)

// Idempotency is a request's idempotency identity, the one type decision
// requests, fallback records and confirmations carry it in. With Key set
// (the Idempotency-Key, the tenant's: the three routes share its keys), a
// repeat within IdempotencyTTL whose body matches the stored record's is
// the same request, answered from the record and storing nothing more;
// another body is ErrIdempotencyConflict. The zero value has no key. Each
// route hashes its bodies its own way (HashBody, HashFallbackBody,
// HashConfirmBody), so a key never replays across routes.
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
