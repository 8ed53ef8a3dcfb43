package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLoadSecretsMissingBesideAStore: keys.json is created in a new data
// dir, read back the same, and refused when missing beside a store: new
// keys there were made silently, voiding every token and decision id
// issued and the customer hashes that deletion records and backup ledgers
// hold. A damaged one says to put back the backup's.
func TestLoadSecretsMissingBesideAStore(t *testing.T) {
	dir := t.TempDir()
	first, err := LoadSecrets(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadSecrets(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("keys read back (-first +again):\n%s", diff)
	}
	if err := os.MkdirAll(filepath.Join(dir, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "db", "CURRENT"), []byte("MANIFEST-000001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, SecretsFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSecrets(dir); err == nil || !strings.Contains(err.Error(), "is missing while") {
		t.Errorf("keys.json gone beside a store: %v, want a refusal", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("new keys were written beside the store")
	}
	if err := os.WriteFile(path, []byte(`{"token": "`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSecrets(dir); err == nil || !strings.Contains(err.Error(), "put back the keys.json of the latest backup") {
		t.Errorf("keys.json damaged: %v, want the advice", err)
	}
}

// TestCheckSecretsRefusesChangedKeys: a store takes the fingerprint of the
// keys it is first opened with and then refuses any other set, such as
// keys.json with one base64 character changed (still 32-byte keys, so
// LoadSecrets reads them): served, those voided every decision id and
// token and changed the customer hashes deletions are matched by.
func TestCheckSecretsRefusesChangedKeys(t *testing.T) {
	changed := func(f func(s *Secrets)) *Secrets {
		s := TestSecrets()
		f(s)
		return s
	}
	tests := []struct {
		name    string
		keys    *Secrets
		refused bool
	}{
		{"the same keys", TestSecrets(), false},
		{"token key changed", changed(func(s *Secrets) { s.Token[7] ^= 0x10 }), true},
		{"decision key changed", changed(func(s *Secrets) { s.Decision[0] ^= 0x01 }), true},
		{"url key changed", changed(func(s *Secrets) { s.URL[31] ^= 0x80 }), true},
		{"hash key changed", changed(func(s *Secrets) { s.Hash[12] ^= 0x04 }), true},
		{"keys moved between purposes", changed(func(s *Secrets) { s.Token, s.URL = s.URL, s.Token }), true},
	}
	fs := NewMemFS()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CheckSecrets(TestSecrets(), "keys.json"); err != nil {
		t.Fatalf("first open: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", fs) // the fingerprint outlives the process
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range tests {
		err := db.CheckSecrets(tc.keys, "d/keys.json")
		if got := err != nil; got != tc.refused {
			t.Errorf("%s: CheckSecrets = %v, want refused %v", tc.name, err, tc.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "d/keys.json does not hold the keys this store was written with") {
			t.Errorf("%s: %v, want it to name the file and say why", tc.name, err)
		}
	}
}
