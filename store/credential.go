package store

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Credential is one integrating system's client credential. Only the
// SHA-256 of the secret is stored: secrets carry 256 bits of randomness, so a
// fast hash is enough and no salt is needed. Records handed out by DB are
// shared and must not be modified; change them with UpdateCredential.
type Credential struct {
	ClientID   string    `json:"client_id"`
	Tenant     string    `json:"tenant"`
	Name       string    `json:"name"`
	Scopes     []string  `json:"scopes"`
	SecretHash []byte    `json:"secret_hash"`
	CreatedAt  time.Time `json:"created_at"`

	// After a rotation the previous secret keeps working until PrevUntil.
	PrevSecretHash []byte    `json:"prev_secret_hash,omitempty"`
	PrevUntil      time.Time `json:"prev_until,omitempty"`
	RotatedAt      time.Time `json:"rotated_at,omitempty"`
	// SecretGen numbers the current secret: each rotation adds one (modulo
	// 2^32), so the previous secret is SecretGen-1. Access tokens carry the
	// generation of the secret they were obtained with (AcceptsGeneration).
	// Records stored before it existed read 0.
	SecretGen uint32 `json:"secret_gen,omitempty"`

	Revoked   bool      `json:"revoked"`
	RevokedAt time.Time `json:"revoked_at,omitempty"`
	// Suspended is set by abuse escalation; it refuses like a revocation until
	// the operator clears it.
	Suspended bool      `json:"suspended,omitempty"`
	LastUsed  time.Time `json:"last_used,omitempty"`
}

// HashSecret returns the stored form of a client secret.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Active reports whether the credential may obtain and use tokens.
func (c *Credential) Active() bool { return !c.Revoked && !c.Suspended }

// SecretMatches compares secret with the current secret and, within the
// rotation grace period, the previous one, in constant time. Both
// comparisons always run so the time taken does not depend on which matched.
// gen is the generation of the secret that matched (SecretGen, or
// SecretGen-1 for the previous one), for the token it obtains.
func (c *Credential) SecretMatches(secret string, now time.Time) (gen uint32, ok bool) {
	h := HashSecret(secret)
	cur := subtle.ConstantTimeCompare(h, c.SecretHash)
	prev := 0
	if len(c.PrevSecretHash) == len(h) {
		prev = subtle.ConstantTimeCompare(h, c.PrevSecretHash)
	} else {
		subtle.ConstantTimeCompare(h, h)
	}
	if prev == 1 && !now.Before(c.PrevUntil) {
		prev = 0
	}
	// The previous generation only when the current secret did not match.
	return c.SecretGen - uint32(prev&^cur), cur|prev == 1
}

// AcceptsGeneration reports whether an access token obtained with the
// secret of generation gen may still be used at now: gen is the current
// generation, or the previous one while its grace lasts (before
// PrevUntil). A token of an older secret, or of a previous one past its
// grace, is refused, so that a rotation cuts the tokens of the secret it
// replaces when that secret stops being accepted. Revocation and
// suspension are checked apart (Active).
func (c *Credential) AcceptsGeneration(gen uint32, now time.Time) bool {
	return gen == c.SecretGen || gen == c.SecretGen-1 && len(c.PrevSecretHash) > 0 && now.Before(c.PrevUntil)
}

// Rotate replaces the secret with the one whose hash is newHash, keeps the
// old one working (for new tokens and the tokens it obtained) until
// now+grace and moves to the next generation. The caller stores the
// result (UpdateCredential).
func (c *Credential) Rotate(newHash []byte, now time.Time, grace time.Duration) {
	c.PrevSecretHash, c.PrevUntil = c.SecretHash, now.Add(grace)
	c.SecretHash, c.RotatedAt = newHash, now
	c.SecretGen++
}

// CreateCredential stores a new credential; ErrExists if the id is taken.
func (db *DB) CreateCredential(c *Credential) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, ok := db.creds[c.ClientID]; ok {
		return fmt.Errorf("store: credential %q: %w", c.ClientID, ErrExists)
	}
	if _, ok := db.tenants[c.Tenant]; !ok {
		return fmt.Errorf("store: tenant %q: %w", c.Tenant, ErrNotFound)
	}
	return putCachedLocked(db, db.creds, c.ClientID, credentialKey(c.ClientID), c)
}

// Credential returns the credential, shared: do not modify it.
func (db *DB) Credential(clientID string) (*Credential, bool) {
	return cached(db, db.creds, clientID)
}

// CredentialBytes is Credential for an id held in a byte slice; the lookup
// does not allocate.
func (db *DB) CredentialBytes(clientID []byte) (*Credential, bool) {
	db.mu.RLock()
	c, ok := db.creds[string(clientID)]
	db.mu.RUnlock()
	return c, ok
}

// Credentials returns the tenant's credentials ordered by client id; an empty
// tenant means every tenant.
func (db *DB) Credentials(tenant string) []*Credential {
	db.mu.RLock()
	defer db.mu.RUnlock()
	var out []*Credential
	for _, id := range slices.Sorted(maps.Keys(db.creds)) {
		if c := db.creds[id]; tenant == "" || c.Tenant == tenant {
			out = append(out, c)
		}
	}
	return out
}

// UpdateCredential applies fn to a copy of the credential, stores it with
// Sync and publishes it.
func (db *DB) UpdateCredential(clientID string, fn func(c *Credential) error) (*Credential, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return updateCachedLocked(db, db.creds, "credential", clientID, credentialKey(clientID), fn)
}

// TouchCredential records last use (token issued) in memory only; it is
// persisted by the next UpdateCredential or by FlushLastUsed, so the token
// path does no extra write.
func (db *DB) TouchCredential(clientID string, now time.Time) {
	db.mu.Lock()
	if c, ok := db.creds[clientID]; ok && now.Sub(c.LastUsed) > time.Second {
		cc := *c
		cc.LastUsed = now
		db.creds[clientID] = &cc
		if db.touched == nil {
			db.touched = map[string]bool{}
		}
		db.touched[clientID] = true
	}
	db.mu.Unlock()
}

// FlushLastUsed persists the last-use times changed since the last flush.
func (db *DB) FlushLastUsed() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if len(db.touched) == 0 {
		return nil
	}
	b := db.NewBatch()
	defer b.Close()
	for id := range db.touched {
		if c, ok := db.creds[id]; ok {
			if err := b.SetJSON(credentialKey(c.ClientID), c); err != nil {
				return err
			}
		}
	}
	if err := b.Commit(); err != nil {
		return err
	}
	clear(db.touched)
	return nil
}

// credentialKey is the key of a credential record.
func credentialKey(clientID string) []byte {
	return appendStr([]byte{spaceGlobal, globalCredential}, clientID)
}

// credentialRecordsPrefix bounds the scan over all credential records.
func credentialRecordsPrefix() []byte { return []byte{spaceGlobal, globalCredential} }
