package store

import (
	"bytes"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/coupond/coupond/atomicfile"
)

// Rotation names the keys RotateSecrets replaces. Only the token key and
// the URL key can be: the decision key signs the decision ids that
// confirmations and events still send back, and the hash key keys the
// customer hashes that deletion records and backup ledgers are matched
// by, so new ones would void both for good.
type Rotation struct {
	Token bool // the key that signs access tokens
	URL   bool // the key that signs result links
}

// The steps of RotateSecrets, in order, as its test hook names them.
const (
	rotateStepNext = "next" // the new keys' fingerprint stored beside the mark
	rotateStepFile = "file" // keys.json replaced by the new keys
	rotateStepMark = "mark" // the mark is the new keys', the other removed
)

// ErrRotationUnsettled wraps the error of a rotation that replaced
// keys.json but could not then store the new keys' fingerprint as the
// mark: the new keys are in force (RotateSecrets returns them with the
// error) and the store's next open settles the mark on them (CheckSecrets).
var ErrRotationUnsettled = errors.New("store: keys.json holds the new keys; the store settles on them at its next open")

// RotateSecrets replaces the keys r names in keys.json of dataDir, the data
// dir whose store db is, with fresh random ones, and returns the new set:
// whatever was signed with a replaced key no longer verifies. The keys
// there must be the ones the store was written with (CheckSecrets).
//
// keys.json and the store's fingerprint never disagree, whatever step a
// crash stops it at: the new keys' fingerprint is first stored beside the
// mark (with Sync), keys.json is then replaced whole (atomicfile: a temporary,
// fsync, rename, fsync of the directory), and only then does the mark
// become the new keys', the other removed (with Sync). A store opened in
// between accepts the keys.json it finds, old or new, and settles on it
// (CheckSecrets). An error before keys.json was replaced leaves the old
// keys in force (nil is returned); one after, ErrRotationUnsettled, comes
// with the new keys, which are then in force.
//
// It holds the store's keys lock (HoldSecrets) throughout.
func (db *DB) RotateSecrets(dataDir string, r Rotation) (*Secrets, error) {
	if !r.Token && !r.URL {
		return nil, errors.New("store: a rotation replaces the token key, the URL key or both")
	}
	db.secretsMu.Lock()
	defer db.secretsMu.Unlock()
	path := filepath.Join(dataDir, SecretsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store: read keys: %w", err)
	}
	cur, err := ParseSecrets(data, path)
	if err != nil {
		return nil, err
	}
	if err := db.CheckSecrets(cur, path); err != nil {
		return nil, err
	}
	next := cur.rotated(r)
	if err := db.rotateStep(rotateStepNext, func() error { return db.setKeysMarks(nil, next.fingerprint()) }); err != nil {
		return nil, fmt.Errorf("store: rotate keys: %w", err)
	}
	if err := db.rotateStep(rotateStepFile, func() error { return writeSecrets(path, next) }); err != nil {
		return nil, fmt.Errorf("store: rotate keys: %w", err)
	}
	if err := db.rotateStep(rotateStepMark, func() error { return db.setKeysMarks(next.fingerprint(), nil) }); err != nil {
		return next, fmt.Errorf("%w: %w", ErrRotationUnsettled, err)
	}
	return next, nil
}

// rotated is a copy of s with the keys r names replaced by random ones.
func (s *Secrets) rotated(r Rotation) *Secrets {
	next := *s
	if r.Token {
		next.Token = randomKey()
	}
	if r.URL {
		next.URL = randomKey()
	}
	return &next
}

// rotateStep runs step name of RotateSecrets, after the test hook: an
// error of the hook is the step's.
func (db *DB) rotateStep(name string, step func() error) error {
	if db.rotateHook != nil {
		if err := db.rotateHook(name); err != nil {
			return err
		}
	}
	return step()
}

// setKeysMarks sets, in one synced batch, the mark to mark when not nil
// and the rotation's fingerprint to next, removing it when next is nil.
func (db *DB) setKeysMarks(mark, next []byte) error {
	b := db.NewBatch()
	defer b.Close()
	if mark != nil {
		b.Set(keysMarkKey(), mark)
	}
	if next != nil {
		b.Set(keysNextKey(), next)
	} else {
		b.Delete(keysNextKey())
	}
	return b.Commit()
}

// writeSecrets replaces the key file at path with s, whole (atomicfile).
func writeSecrets(path string, s *Secrets) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, 0o600, data)
}

// HoldSecrets keeps RotateSecrets from running until the returned func is
// called: a backup holds it from its copy of the store to its read of
// keys.json, so that the copy's fingerprint and the keys it copies are of
// the same rotation.
func (db *DB) HoldSecrets() (release func()) {
	db.secretsMu.RLock()
	return db.secretsMu.RUnlock
}

// SameInstallation reports whether a and b, the bytes of two key files,
// are the same (blanks around them aside) or decode to keys of the same
// installation: the same decision and hash keys, which no rotation
// replaces. Two copies of one installation's keys.json taken either side
// of a rotation differ in their token or URL key and are still the same
// installation's.
func SameInstallation(a, b []byte) bool {
	if bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) {
		return true
	}
	sa, err := ParseSecrets(a, SecretsFile)
	if err != nil {
		return false
	}
	sb, err := ParseSecrets(b, SecretsFile)
	if err != nil {
		return false
	}
	return hmac.Equal(sa.Decision, sb.Decision) && hmac.Equal(sa.Hash, sb.Hash)
}

// AcceptSecrets records s's fingerprint beside the store's, with Sync, as
// a rotation does (RotateSecrets): the store then opens beside a keys.json
// holding either set and settles on the one it finds (CheckSecrets). A
// restore gives it to the backup's store it brings back, before that store
// replaces the data dir's, when the data dir's keys were rotated since the
// backup: it swaps the store in, then puts the backup's keys.json in place,
// and a crash in between leaves a store that accepts the keys.json there.
func (db *DB) AcceptSecrets(s *Secrets) error {
	return db.setKeysMarks(nil, s.fingerprint())
}

// RotationStopped reports whether a key rotation stopped before it
// finished (a crash, a failed write) and is not settled yet: the store
// holds the fingerprint of the keys it was writing, which the next
// CheckSecrets settles.
func (db *DB) RotationStopped() bool {
	_, err := db.Get(keysNextKey())
	return err == nil
}
