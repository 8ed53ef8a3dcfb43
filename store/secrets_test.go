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
