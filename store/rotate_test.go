package store

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
)

// rotationSetup is a data dir (a temp dir holding keys.json) and its
// store on fs, opened and checked against the keys as serve does.
func rotationSetup(t *testing.T, fs vfs.FS) (dir string, db *DB, old *Secrets) {
	t.Helper()
	dir = t.TempDir()
	old, err := LoadSecrets(dir)
	if err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CheckSecrets(old, filepath.Join(dir, SecretsFile)); err != nil {
		t.Fatal(err)
	}
	return dir, db, old
}

// TestRotateSecrets: a rotation replaces the keys it names and only those,
// in keys.json and in the store's fingerprint: the new keys pass
// CheckSecrets and CheckSecretsFile, the old ones are refused by both, and a
// rotation that names no key is refused.
func TestRotateSecrets(t *testing.T) {
	tests := []struct {
		name       string
		r          Rotation
		token, url bool // changed
	}{
		{"token", Rotation{Token: true}, true, false},
		{"url", Rotation{URL: true}, false, true},
		{"both", Rotation{Token: true, URL: true}, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, db, old := rotationSetup(t, NewMemFS())
			defer db.Close()
			oldData, _ := os.ReadFile(filepath.Join(dir, SecretsFile))
			next, err := db.RotateSecrets(dir, tc.r)
			if err != nil {
				t.Fatal(err)
			}
			onDisk, err := LoadSecrets(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(next, onDisk); diff != "" {
				t.Errorf("keys.json (-returned +on disk):\n%s", diff)
			}
			changed := func(a, b []byte) bool { return string(a) != string(b) }
			got := []bool{changed(old.Token, next.Token), changed(old.URL, next.URL), changed(old.Decision, next.Decision), changed(old.Hash, next.Hash)}
			if diff := cmp.Diff([]bool{tc.token, tc.url, false, false}, got); diff != "" {
				t.Errorf("keys changed: token, url, decision, hash (-want +got):\n%s", diff)
			}
			if err := db.CheckSecrets(next, "keys.json"); err != nil {
				t.Errorf("new keys: %v", err)
			}
			if err := db.CheckSecrets(old, "keys.json"); err == nil {
				t.Error("old keys still accepted by CheckSecrets")
			}
			newData, _ := os.ReadFile(filepath.Join(dir, SecretsFile))
			if err := db.CheckSecretsFile(newData, "keys.json"); err != nil {
				t.Errorf("CheckSecretsFile of the new keys.json: %v", err)
			}
			if err := db.CheckSecretsFile(oldData, "keys.json"); err == nil {
				t.Error("CheckSecretsFile accepts the old keys.json")
			}
			if !SameInstallation(oldData, newData) {
				t.Error("keys.json before and after a rotation are not the same installation's")
			}
			if other, _ := json.Marshal(TestSecrets()); SameInstallation(newData, other) {
				t.Error("another installation's keys.json taken for this one's")
			}
			if info, err := os.Stat(filepath.Join(dir, SecretsFile)); err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("keys.json after rotation: %v %v, want mode 0600", info.Mode(), err)
			}
		})
	}
	dir, db, _ := rotationSetup(t, NewMemFS())
	defer db.Close()
	if _, err := db.RotateSecrets(dir, Rotation{}); err == nil {
		t.Error("a rotation of no key was not refused")
	}
}

// errCrash is what the test hook stops a rotation with.
var errCrash = errors.New("crash")

// crashPoint is the state a crash before one step of a rotation (or after
// its last, "done") leaves: the store's synced writes (a crash clone of
// its file system) and the bytes of keys.json then.
type crashPoint struct {
	step string
	fs   vfs.FS
	keys []byte
}

// TestRotateSecretsCrash: a crash before any step of a rotation leaves
// keys.json and the store's fingerprint agreeing. The store opened on what
// the crash left accepts the keys.json it finds (the old keys while the
// file was not replaced yet, the new ones after), settles on them (no
// rotation's fingerprint left, the other set refused from then on), and
// serves again without help.
func TestRotateSecretsCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	dir, db, old := rotationSetup(t, mem)
	path := filepath.Join(dir, SecretsFile)
	var points []crashPoint
	db.rotateHook = func(step string) error {
		keys, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		points = append(points, crashPoint{step, mem.CrashClone(vfs.CrashCloneCfg{}), keys})
		return nil
	}
	next, err := db.RotateSecrets(dir, Rotation{Token: true, URL: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.rotateHook("done"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	want := map[string]*Secrets{rotateStepNext: old, rotateStepFile: old, rotateStepMark: next, "done": next}
	var steps []string
	for _, p := range points {
		steps = append(steps, p.step)
		keys, err := ParseSecrets(p.keys, path)
		if err != nil {
			t.Fatalf("%s: keys.json: %v", p.step, err)
		}
		if diff := cmp.Diff(want[p.step], keys); diff != "" {
			t.Errorf("crash before %s: keys.json (-want +got):\n%s", p.step, diff)
		}
		other := old
		if cmp.Equal(keys, old) {
			other = next
		}
		checkCrashed(t, p, keys, other)
	}
	if diff := cmp.Diff([]string{rotateStepNext, rotateStepFile, rotateStepMark, "done"}, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// checkCrashed opens the store p's crash left with keys, the keys.json it
// left: accepted, settled on (no rotation's fingerprint left), other refused
// from then on, and all of it still so after another open.
func checkCrashed(t *testing.T, p crashPoint, keys, other *Secrets) {
	t.Helper()
	for i := range 2 {
		first := i == 0
		db, err := Open("db", p.fs)
		if err != nil {
			t.Fatalf("%s: open: %v", p.step, err)
		}
		stopped := db.RotationStopped()
		if err := db.CheckSecrets(keys, "keys.json"); err != nil {
			t.Errorf("crash before %s: the keys.json left is refused: %v", p.step, err)
		}
		if want := first && (p.step == rotateStepFile || p.step == rotateStepMark); stopped != want {
			t.Errorf("crash before %s: RotationStopped = %v, want %v", p.step, stopped, want)
		}
		if _, err := db.Get(keysNextKey()); !errors.Is(err, ErrNotFound) {
			t.Errorf("crash before %s: a rotation's fingerprint is left after the open (%v)", p.step, err)
		}
		if err := db.CheckSecrets(other, "keys.json"); err == nil {
			t.Errorf("crash before %s: the other keys are accepted too", p.step)
		}
		db.Close()
	}
}

// TestRotateSecretsFails: a rotation that fails before keys.json is
// replaced keeps the old keys (nothing returned, the store still takes
// them); one that fails after returns the new keys with
// ErrRotationUnsettled, and the store, without a restart, takes them
// (its copy, a backup's, too) and settles on them at its next check.
func TestRotateSecretsFails(t *testing.T) {
	tests := []struct {
		step      string
		unsettled bool
	}{
		{rotateStepNext, false},
		{rotateStepFile, false},
		{rotateStepMark, true},
	}
	for _, tc := range tests {
		t.Run(tc.step, func(t *testing.T) {
			dir, db, old := rotationSetup(t, NewMemFS())
			defer db.Close()
			path := filepath.Join(dir, SecretsFile)
			db.rotateHook = func(step string) error {
				if step == tc.step {
					return errCrash
				}
				return nil
			}
			next, err := db.RotateSecrets(dir, Rotation{Token: true})
			if !errors.Is(err, errCrash) || errors.Is(err, ErrRotationUnsettled) != tc.unsettled || (next != nil) != tc.unsettled {
				t.Fatalf("RotateSecrets = %v, %v; want the crash, unsettled %v", next != nil, err, tc.unsettled)
			}
			db.rotateHook = nil
			inForce := old
			if tc.unsettled {
				inForce = next
			}
			onDisk, err := LoadSecrets(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(inForce, onDisk); diff != "" {
				t.Errorf("keys.json (-in force +on disk):\n%s", diff)
			}
			data, _ := os.ReadFile(path)
			if err := db.CheckSecretsFile(data, path); err != nil {
				t.Errorf("CheckSecretsFile of the keys in force: %v", err)
			}
			if err := db.CheckSecrets(onDisk, path); err != nil {
				t.Errorf("CheckSecrets of the keys in force: %v", err)
			}
			if _, err := db.Get(keysNextKey()); !errors.Is(err, ErrNotFound) {
				t.Errorf("a rotation's fingerprint is left after the check (%v)", err)
			}
			if again, err := db.RotateSecrets(dir, Rotation{URL: true}); err != nil || string(again.Token) != string(onDisk.Token) {
				t.Errorf("a rotation after the failed one: %v", err)
			}
		})
	}
}

// TestHoldSecretsDefersRotation: a rotation waits for the holder of
// HoldSecrets (a backup between its copy of the store and of keys.json),
// and goes on once released.
func TestHoldSecretsDefersRotation(t *testing.T) {
	dir, db, _ := rotationSetup(t, NewMemFS())
	defer db.Close()
	release := db.HoldSecrets()
	done := make(chan error, 1)
	go func() {
		_, err := db.RotateSecrets(dir, Rotation{URL: true})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("rotation ran while held (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rotation still waiting after the release")
	}
}
