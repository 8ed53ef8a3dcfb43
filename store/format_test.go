package store

import (
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
)

// TestFormatMark: Open marks a store of no mark (an earlier release's) or
// of an older format with Format, and refuses one a newer release marked,
// saying why and what to do, and leaving its files as they were (names and
// bytes: Pebble opened for writing replayed its log into a new table and
// wrote a new MANIFEST, OPTIONS and log before the mark was read, while the
// error said "left unchanged"). Without the mark an
// older release opened a newer one's store and read the records of its new
// codec versions as damaged (a release of 2026-12-02 on a data dir this
// one served: 112 of 112 decision records).
func TestFormatMark(t *testing.T) {
	for _, tt := range []struct {
		name    string
		mark    []byte // nil: none
		wantErr bool
	}{
		{"earlier release, no mark", nil, false},
		{"older format", binary.BigEndian.AppendUint64(nil, Format-1), false},
		{"this format", binary.BigEndian.AppendUint64(nil, Format), false},
		{"newer format", binary.BigEndian.AppendUint64(nil, Format+1), true},
	} {
		fs := NewMemFS()
		db, err := Open("db", fs)
		if err != nil {
			t.Fatal(err)
		}
		b := db.NewBatch()
		if tt.mark == nil {
			b.Delete(formatKey())
		} else {
			b.Set(formatKey(), tt.mark)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		b.Close()
		db.Close()
		for range 2 { // a refused store is left as it was: refused again
			before := dirFiles(t, fs, "db")
			db, err = Open("db", fs)
			if tt.wantErr {
				if diff := cmp.Diff(before, dirFiles(t, fs, "db")); diff != "" {
					t.Errorf("%s: the refused store's files changed (-before +after):\n%s", tt.name, diff)
				}
				if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "admin restore") {
					t.Errorf("%s: Open: %v, want ErrNewerFormat saying what to do", tt.name, err)
				}
				if err == nil {
					db.Close()
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: Open: %v", tt.name, err)
			}
			v, err := db.Get(formatKey())
			if err != nil || len(v) != 8 || binary.BigEndian.Uint64(v) != Format {
				t.Errorf("%s: mark %x (%v), want %d", tt.name, v, err, Format)
			}
			db.Close()
		}
	}
}

// dirFiles is every file of dir in fs, by name, with its bytes but for
// the LOCK file's (Pebble's directory lock, which holds none).
func dirFiles(t *testing.T, fs vfs.FS, dir string) map[string]string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, name := range names {
		f, err := fs.Open(fs.PathJoin(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(data)
	}
	return files
}
