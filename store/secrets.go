package store

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Secrets are the installation's signing keys. They are generated on first
// start, kept in the data dir in SecretsFile with mode 0600 and survive
// restarts. Each key has one purpose.
type Secrets struct {
	Token    []byte `json:"token"`    // signs access tokens
	Decision []byte `json:"decision"` // signs decision ids
	URL      []byte `json:"url"`      // signs result URLs
	Hash     []byte `json:"hash"`     // keys the hashes of cliente_ref (control group, deletion records)
}

// SecretsFile is the name of the key file inside the data dir.
const SecretsFile = "keys.json"

// LoadSecrets reads the key file in dir, creating it with fresh random keys
// if it does not exist and dir holds no store yet (a new data dir). Missing
// beside a store (dir/db), it is an error rather than new keys: those would
// void every token, decision id and signed URL issued, and the keyed hashes
// of the customers that deletion records and backup ledgers hold, so a
// restored backup could no longer erase a customer deleted since.
func LoadSecrets(dir string) (*Secrets, error) {
	path := filepath.Join(dir, SecretsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if entries, err := os.ReadDir(filepath.Join(dir, "db")); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("store: %s is missing while %s holds a store: put back the keys.json of the latest backup "+
				"(one taken since the keys' last rotation, if any) or restore that backup (coupond admin restore); new keys would void every token and "+
				"decision id issued and the customer hashes of deletion records", path, dir)
		}
		return createSecrets(dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read keys: %w", err)
	}
	return ParseSecrets(data, path)
}

// ParseSecrets decodes data, the bytes of the key file at path (its name
// in the error of data that does not decode).
func ParseSecrets(data []byte, path string) (*Secrets, error) {
	var s Secrets
	if err := json.Unmarshal(data, &s); err != nil || len(s.Token) < 32 || len(s.Decision) < 32 || len(s.URL) < 32 || len(s.Hash) < 32 {
		return nil, fmt.Errorf("store: %s is damaged: put back the keys.json of the latest backup (one taken since the keys' last rotation, if any) "+
			"or restore that backup (coupond admin restore)", path)
	}
	return &s, nil
}

func createSecrets(dir, path string) (*Secrets, error) {
	s := &Secrets{Token: randomKey(), Decision: randomKey(), URL: randomKey(), Hash: randomKey()}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: data dir: %w", err)
	}
	if err := writeSecrets(path, s); err != nil {
		return nil, fmt.Errorf("store: write keys: %w", err)
	}
	return s, nil
}

// TestSecrets returns fixed keys for tests.
func TestSecrets() *Secrets {
	k := func(b byte) []byte {
		out := make([]byte, 32)
		for i := range out {
			out[i] = b
		}
		return out
	}
	return &Secrets{Token: k(1), Decision: k(2), URL: k(3), Hash: k(4)}
}

func randomKey() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return b
}

// CustomerHash is the keyed hash of a tenant's cliente_ref, hex-encoded: what
// deletion records, the access log after deletion and the control-group draw
// use instead of the raw identifier.
func (s *Secrets) CustomerHash(tenant, clienteRef string) string {
	m := hmac.New(sha256.New, s.Hash)
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write([]byte(clienteRef))
	return fmt.Sprintf("%x", m.Sum(nil)[:20])
}

// keysMarkKey is the key of the keys' fingerprint: 0x01 'K' → fingerprint.
func keysMarkKey() []byte { return []byte{spaceGlobal, globalKeysMark} }

// keysNextKey is the key of the fingerprint of the keys a rotation is
// writing (RotateSecrets): 0x01 'N' → fingerprint.
func keysNextKey() []byte { return []byte{spaceGlobal, globalKeysNext} }

// fingerprint is the SHA-256 of the four keys, each after its length: it
// tells one set of keys from another and reveals none of them.
func (s *Secrets) fingerprint() []byte {
	h := sha256.New()
	for _, k := range [][]byte{s.Token, s.Decision, s.URL, s.Hash} {
		h.Write([]byte{byte(len(k) >> 8), byte(len(k))})
		h.Write(k)
	}
	return h.Sum(nil)
}

// CheckSecrets refuses keys s, read from keysPath, that are not the keys
// the store was written with. A byte of keys.json changed in place (a bad
// sector, an edit) mostly leaves valid base64 and so a key of the right
// length, which LoadSecrets cannot tell from the real one: served, it
// would void every decision id, token and signed link issued, move
// customers in and out of the control group, and change the customer
// hashes that deletion records and backup ledgers match, so that a
// restored backup no longer erases customers deleted since. The keys of
// another installation put back by mistake are refused the same way.
//
// A store without a fingerprint (a new one, or one written by a release
// before this check) is given s's, with Sync; one not stored (a full
// disk) is left to the next open, since the keys are then taken on trust
// as before.
//
// A rotation that stopped (RotateSecrets: a crash, a failed write) left
// the fingerprint of the keys it was writing beside the store's: s is
// accepted when it matches either, and the store keeps s's alone, with
// Sync (the rotation undone when keys.json kept the old keys, finished
// when it holds the new ones). A commit that fails there is left to the
// next open, which resolves it the same way.
func (db *DB) CheckSecrets(s *Secrets, keysPath string) error {
	want := s.fingerprint()
	got, err := db.Get(keysMarkKey())
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("store: read the keys' fingerprint: %w", err)
	}
	next, nerr := db.Get(keysNextKey())
	if nerr != nil && !errors.Is(nerr, ErrNotFound) {
		return fmt.Errorf("store: read the fingerprint of a rotation's keys: %w", nerr)
	}
	marked, stopped := err == nil && hmac.Equal(got, want), nerr == nil
	switch {
	case marked && !stopped:
		return nil
	case marked, errors.Is(err, ErrNotFound), stopped && hmac.Equal(next, want):
		b := db.NewBatch()
		defer b.Close()
		b.Set(keysMarkKey(), want)
		b.Delete(keysNextKey())
		_ = b.Commit()
		return nil
	}
	return otherKeysError(keysPath)
}

func otherKeysError(keysPath string) error {
	return fmt.Errorf("store: %s does not hold the keys this store was written with (damaged, or another installation's): "+
		"put back the keys.json of the latest backup (one taken since the keys' last rotation, if any)", keysPath)
}

// CheckSecretsFile refuses data, the bytes of the key file at keysPath,
// unless they decode to the keys the store was written with (CheckSecrets),
// for a copy of them: a backup's. The file can change on disk after the
// server read it at start, and a backup copying it then would hold keys
// that void its own decision ids and customer hashes, a damage its
// manifest's checksums take for the truth. A store without a fingerprint
// yet accepts any bytes: there is nothing to check them against. The keys
// of a rotation that stopped after writing keys.json (RotateSecrets) are
// accepted too: a copy of the store holds their fingerprint as well, and
// its next open settles on them (CheckSecrets). The caller holds
// HoldSecrets from its copy of the store to its read of data, so that no
// rotation falls in between.
func (db *DB) CheckSecretsFile(data []byte, keysPath string) error {
	got, err := db.Get(keysMarkKey())
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: read the keys' fingerprint: %w", err)
	}
	s, err := ParseSecrets(data, keysPath)
	if err != nil {
		return err
	}
	fp := s.fingerprint()
	if hmac.Equal(got, fp) {
		return nil
	}
	if next, err := db.Get(keysNextKey()); err == nil && hmac.Equal(next, fp) {
		return nil
	}
	return otherKeysError(keysPath)
}
