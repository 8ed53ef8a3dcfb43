package privacy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockDataDirSaysWhy: a data dir locked by another holder is "in use";
// one whose lock file cannot be opened (here a directory is in its place;
// no permission and a read-only disk fail alike) is not said to be in use,
// which sent operators looking for a process that was not there.
func TestLockDataDirSaysWhy(t *testing.T) {
	held := t.TempDir()
	l, err := LockDataDir(held)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	blocked := t.TempDir()
	if err := os.Mkdir(filepath.Join(blocked, lockFile), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, want, not string
		inUse                bool // errors.Is ErrDataDirInUse
	}{
		{"held by another holder", held, "is in use by another coupond", "", true},
		{"lock file cannot be opened", blocked, "cannot be used", "in use", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LockDataDir(tc.dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.not != "" && strings.Contains(err.Error(), tc.not)) {
				t.Errorf("LockDataDir: %v; want an error holding %q and not %q", err, tc.want, tc.not)
			}
			if got := errors.Is(err, ErrDataDirInUse); got != tc.inUse {
				t.Errorf("errors.Is(%v, ErrDataDirInUse) = %v, want %v", err, got, tc.inUse)
			}
		})
	}
}
