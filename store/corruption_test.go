package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
)

// TestDamagedTableFailsTheRead: a flipped byte in an sstable makes the scan
// that reads it return an error and logs the file's name, without parking
// the store. Pebble's default (Fatalf) parked the reader forever: admin
// check hung and every later write was refused as "a write failed".
func TestDamagedTableFailsTheRead(t *testing.T) {
	fs := NewMemFS()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var buf bytes.Buffer
	db.SetLog(zerolog.New(&buf))
	for i := range 20000 {
		if err := db.pdb.Set(fmt.Appendf(nil, "k%06d", i), bytes.Repeat([]byte{byte(i)}, 64), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	sst := flipMiddleOfTable(t, fs, "db")
	done := make(chan error, 1)
	go func() { done <- db.Scan(nil, nil, func(_, _ []byte) error { return nil }) }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("scan over a damaged sstable never returned")
	}
	if err == nil {
		t.Error("scan over a damaged sstable: no error")
	}
	if db.space.isParked() {
		t.Error("store parked after a damaged read")
	}
	if !strings.Contains(buf.String(), sst) || !strings.Contains(buf.String(), "restore") {
		t.Errorf("log %q does not name %s and what to do", buf.String(), sst)
	}
	checkNamesDamage(t, err, sst)
}

// TestDamagedTableOfTenantsRefusesOpenWithAdvice: a flipped byte in the
// table file that holds the tenants stops Open (serve and every admin
// command) with an error that names the file and says to restore, not
// Pebble's "file 000005: block 0/308: crc32c checksum mismatch" followed by
// a line "<corruption detail carrier>".
func TestDamagedTableOfTenantsRefusesOpenWithAdvice(t *testing.T) {
	fs := NewMemFS()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := db.CreateTenant(&Tenant{ID: fmt.Sprintf("t%03d", i), CreatedAt: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sst := flipMiddleOfTable(t, fs, "db")
	db, err = Open("db", fs)
	if err == nil {
		db.Close()
		t.Fatal("Open over a damaged table of tenants: no error")
	}
	checkNamesDamage(t, err, sst)
}

// checkNamesDamage fails t unless err is a *DamagedFileError naming the
// table file sst, whose message says to restore and holds none of
// Pebble's inner lines.
func checkNamesDamage(t *testing.T, err error, sst string) {
	t.Helper()
	var dmg *DamagedFileError
	if !errors.As(err, &dmg) || !strings.HasSuffix(dmg.Path, sst) {
		t.Errorf("error %q: want a DamagedFileError naming %s", err, sst)
	}
	msg := err.Error()
	if !strings.Contains(msg, sst) || !strings.Contains(msg, "restore the latest backup") || strings.Contains(msg, "\n") {
		t.Errorf("error %q: want one line naming %s and saying to restore the latest backup", msg, sst)
	}
}

// flipMiddleOfTable inverts the byte in the middle of dir's only sstable
// and returns its name.
func flipMiddleOfTable(t *testing.T, fs vfs.FS, dir string) string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".sst") {
			continue
		}
		f, err := fs.OpenReadWrite(fs.PathJoin(dir, n), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0xff
		if _, err := f.WriteAt(b, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return n
	}
	t.Fatal("no sstable")
	return ""
}

// TestDamagedManifestOrOptionsRefusesWithAdvice: a store whose MANIFEST or
// OPTIONS file is damaged does not open, and the error says to restore a
// backup (it used to be Pebble's message alone, "invalid key=value syntax").
func TestDamagedManifestOrOptionsRefusesWithAdvice(t *testing.T) {
	for _, prefix := range []string{"MANIFEST-", "OPTIONS-"} {
		fs := NewMemFS()
		db, err := Open("db", fs)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.pdb.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		db.Close()
		names, _ := fs.List("db")
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				f, _ := fs.OpenReadWrite(fs.PathJoin("db", n), vfs.WriteCategoryUnspecified)
				st, _ := f.Stat()
				f.WriteAt([]byte{0xff, 0xee, 0x00}, st.Size()/2)
				f.Close()
			}
		}
		_, err = Open("db", fs)
		if err == nil || !strings.Contains(err.Error(), "restore the latest backup") {
			t.Errorf("%s damaged: Open error %v, want one that says to restore the latest backup", prefix, err)
		}
	}
}
