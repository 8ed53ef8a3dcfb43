package cli

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/atomicfile/faultfs"
)

// TestAdminAuditOnFullDisk: an admin command whose audit line cannot be
// written (a full disk) runs all the same and its client is warned on
// stderr; the line is kept and written with the next one once space is
// back, so the log misses no command.
func TestAdminAuditOnFullDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	e, err := openEnv(context.Background(), dir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	path := filepath.Join(dir, auditFile)
	fsys := faultfs.New(atomicfile.OS{}, nil)
	sock := filepath.Join(dir, adminSocket)
	srv, err := serveAdminAudit(context.Background(), sock, e, &auditLog{path: path, fs: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	steps := []struct {
		args []string
		full bool   // the disk is full
		warn string // in the command's stderr; "" for none
	}{
		{[]string{"admin", "tenant", "create", "acme"}, true, "kept in memory"},
		{[]string{"admin", "tenant", "show", "acme"}, true, "kept in memory"},
		{[]string{"admin", "tenant", "list"}, false, ""},
	}
	var want [][]string
	for _, s := range steps {
		fsys.SetFault(nil)
		if s.full {
			fsys.SetFault(func(op faultfs.Op) error {
				if op.Kind == faultfs.Write && op.Path == path {
					return faultfs.NoSpace(op)
				}
				return nil
			})
		}
		var stderr bytes.Buffer
		if err := forwardAdmin(context.Background(), sock, adminWait{adminDial, defaultAdminTotal}, s.args, io.Discard, &stderr); err != nil {
			t.Fatalf("%v (disk full %v): %v; want it run", s.args, s.full, err)
		}
		if got := stderr.String(); s.warn == "" && got != "" || !strings.Contains(got, s.warn) {
			t.Errorf("%v stderr %q, want a warning with %q", s.args, got, s.warn)
		}
		want = append(want, s.args)
	}
	entries, _, err := readAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, en := range entries {
		got = append(got, en.Args)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit log once space is back (-want +got):\n%s", diff)
	}
}
