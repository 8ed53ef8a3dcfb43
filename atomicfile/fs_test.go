package atomicfile_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/atomicfile/faultfs"
)

// TestWriteOnFullDisk: whichever call of a whole-file write meets a full
// disk, the write fails with ENOSPC and the path holds the old file or
// the complete new one, never a part, with no temporary file left; once
// space is back the same write succeeds.
func TestWriteOnFullDisk(t *testing.T) {
	tests := []struct {
		name  string
		kind  faultfs.Kind
		after string // the file's content after the failed write
	}{
		{"open", faultfs.Open, "old"},
		{"first write", faultfs.Write, "old"},
		{"file sync", faultfs.Sync, "old"},
		{"rename", faultfs.Rename, "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			fsys := faultfs.New(atomicfile.OS{}, func(op faultfs.Op) error {
				if op.Kind == tt.kind {
					return faultfs.NoSpace(op)
				}
				return nil
			})
			write := func() error {
				a, err := atomicfile.CreateFS(fsys, path, 0o600)
				if err != nil {
					return err
				}
				defer a.Abort()
				for _, p := range []string{"new ", "content"} {
					if _, err := io.WriteString(a, p); err != nil {
						return err
					}
				}
				return a.Commit()
			}
			if err := write(); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write on a full disk: %v, want ENOSPC", err)
			}
			if diff := cmp.Diff([]string{"f"}, names(t, dir)); diff != "" {
				t.Errorf("files after the failed write (-want +got):\n%s", diff)
			}
			if got, _ := os.ReadFile(path); string(got) != tt.after {
				t.Errorf("content after the failed write: %q, want %q", got, tt.after)
			}
			fsys.SetFault(nil)
			if err := write(); err != nil {
				t.Fatalf("write once space is back: %v", err)
			}
			if got, _ := os.ReadFile(path); string(got) != "new content" {
				t.Errorf("content once space is back: %q", got)
			}
		})
	}
}

// TestDirSyncFailureKeepsCompleteFile: when only the directory's fsync
// fails, Commit reports it and the complete file is in place.
func TestDirSyncFailureKeepsCompleteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	fsys := faultfs.New(atomicfile.OS{}, func(op faultfs.Op) error {
		if op.Kind == faultfs.Sync && op.Path == dir {
			return &os.PathError{Op: "sync", Path: dir, Err: syscall.EIO}
		}
		return nil
	})
	a, err := atomicfile.CreateFS(fsys, path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(a, "whole")
	if err := a.Commit(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Commit = %v, want the directory's EIO", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "whole" {
		t.Errorf("content %q, want the complete file", got)
	}
}

// TestAppendOnFullDisk: an append that meets a full disk fails with
// ENOSPC and adds nothing; the next one, once space is back, lands after
// the lines already there.
func TestAppendOnFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	fsys := faultfs.New(atomicfile.OS{}, nil)
	if err := atomicfile.AppendFS(fsys, path, 0o600, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	fsys.SetFault(func(op faultfs.Op) error {
		if op.Kind == faultfs.Write {
			return faultfs.NoSpace(op)
		}
		return nil
	})
	if err := atomicfile.AppendFS(fsys, path, 0o600, []byte("two\n")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append on a full disk: %v, want ENOSPC", err)
	}
	fsys.SetFault(nil)
	if err := atomicfile.AppendFS(fsys, path, 0o600, []byte("three\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "one\nthree\n" {
		t.Errorf("log %q, want one and three", got)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// TestCreateEmpty: CreateEmpty makes an empty owner-only file, and a
// second call for the same path fails with fs.ErrExist (a claim).
func TestCreateEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claim")
	if err := atomicfile.CreateEmpty(path, 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Size() != 0 || info.Mode().Perm() != 0o600 {
		t.Fatalf("claimed file: %v %v", info, err)
	}
	if err := atomicfile.CreateEmpty(path, 0o600); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second claim: %v, want fs.ErrExist", err)
	}
}
