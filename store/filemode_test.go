//go:build unix

package store

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestStoreFilesOwnerOnly: in a pre-existing 0755 directory and under a
// permissive umask, every file of the store and of a checkpoint of it is
// 0600 and every directory 0700.
func TestStoreFilesOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	parent := t.TempDir()
	dir := filepath.Join(parent, "db")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Set([]byte("k"), []byte("v"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.PurgeWAL(context.Background()); err != nil { // recycles and creates logs
		t.Fatal(err)
	}
	if err := db.Checkpoint(filepath.Join(parent, "backup", "db")); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	for _, root := range []string{dir, filepath.Join(parent, "backup", "db")} {
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // an obsolete file Pebble removed while we walked
			}
			if err != nil {
				t.Fatal(err)
			}
			want := FileMode
			if d.IsDir() {
				want = DirMode
			}
			if got := info.Mode().Perm(); got != want {
				t.Errorf("%s: mode %v, want %v", path, got, want)
			}
			n++
			return nil
		})
	}
	if n < 6 {
		t.Fatalf("walked only %d entries", n)
	}
}
