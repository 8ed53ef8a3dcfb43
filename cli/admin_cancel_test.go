//go:build linux

package cli

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

// TestLongAdminCommandsStopWithTheirContext: admin evaluate, backup,
// backups --verify and shadow report run inside serve stop once their context ends (here
// serve's, ended before they start; the admin client's Ctrl-C ends it
// too), as admin check does: each is audited as exit 1 "context canceled"
// and the backup leaves no directory and nothing listed. They ran to their
// end inside serve (a whole evaluation, a whole backup left complete,
// every backup read whole), audited as having succeeded.
func TestLongAdminCommandsStopWithTheirContext(t *testing.T) {
	_, data, _ := backedUpTenant(t)
	out := filepath.Join(t.TempDir(), "interrupted")
	e, err := openEnv(context.Background(), data, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.close() })
	ended, end := context.WithCancel(context.Background())
	end()
	srv, err := serveAdmin(ended, filepath.Join(data, adminSocket), e)
	if err != nil {
		t.Fatal(err)
	}
	lines := [][]string{
		{"admin", "evaluate", "--tenant", "acme"},
		{"admin", "backup", "--out", out},
		{"admin", "backups", "--verify"},
		{"admin", "shadow", "report", "--tenant", "acme"},
	}
	type outcome struct {
		Command   string
		Exit      int
		Err       string
		AuditExit int
		AuditErr  string
	}
	var want, got []outcome
	for _, args := range lines {
		r := runLine(t, append(args, "--data-dir", data)...)
		want = append(want, outcome{strings.Join(args[:2], " "), 1, "context canceled", 1, "context canceled"})
		got = append(got, outcome{Command: strings.Join(args[:2], " "), Exit: r.Exit, Err: r.Err})
	}
	srv.Close()
	entries, err := socketAudit(filepath.Join(data, auditFile))
	if err != nil || len(entries) != len(lines) {
		t.Fatalf("audit log: %d entries, %v; want %d", len(entries), err, len(lines))
	}
	for i, a := range entries {
		got[i].AuditExit, got[i].AuditErr = a.Exit, a.Error
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("long admin commands with their context ended (-want +got):\n%s", diff)
	}
	l, err := e.svc.backups.List(context.Background(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range l.Backups {
		if b.Dir == out {
			t.Errorf("the interrupted backup is listed: %+v", b)
		}
	}
	if matches, _ := filepath.Glob(out + "*"); len(matches) != 0 {
		t.Errorf("the interrupted backup left %v", matches)
	}
}

// TestAdminBackupStopsWithItsClient: an admin backup run through serve's
// socket stops once its client goes away (Ctrl-C): audited as exit 1
// "context canceled", leaving no directory and nothing listed. The
// backup is held in its read of the data dir's keys.json, made a FIFO
// once serve has read it, until the client is gone.
func TestAdminBackupStopsWithItsClient(t *testing.T) {
	_, data, _ := backedUpTenant(t)
	keysPath := filepath.Join(data, "keys.json")
	keys, err := os.ReadFile(keysPath)
	if err != nil {
		t.Fatal(err)
	}
	serveInProcess(t, data)
	if err := os.Remove(keysPath); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(keysPath, 0o600); err != nil {
		t.Fatal(err)
	}
	defer writeBytes(t, keysPath, keys) // after the FIFO's removal below
	out := filepath.Join(t.TempDir(), "interrupted")
	ctx, interrupt := context.WithCancel(context.Background())
	backedUp := make(chan error, 1)
	go func() {
		backedUp <- Run(ctx, []string{"admin", "backup", "--out", out, "--data-dir", data}, nil, io.Discard, io.Discard)
	}()
	var writer int
	waitFor(t, 20*time.Second, "admin backup reading keys.json", func() bool {
		fd, err := syscall.Open(keysPath, syscall.O_WRONLY|syscall.O_NONBLOCK, 0)
		writer = fd
		return err == nil
	})
	interrupt()
	if err := <-backedUp; err == nil {
		t.Error("admin backup interrupted: no error")
	}
	time.Sleep(time.Second) // serve sees the client gone
	if _, err := syscall.Write(writer, keys); err != nil {
		t.Fatal(err)
	}
	syscall.Close(writer)
	var entry auditEntry
	waitFor(t, 20*time.Second, "admin backup's audit entry", func() bool {
		entries, _ := socketAudit(filepath.Join(data, auditFile))
		for _, e := range entries {
			if slices.Contains(e.Args, "backup") {
				entry = e
				return true
			}
		}
		return false
	})
	if entry.Exit != 1 || entry.Error != "context canceled" {
		t.Errorf("interrupted admin backup audited as exit %d %q, want exit 1 \"context canceled\"", entry.Exit, entry.Error)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the interrupted backup left %s: %v", out, err)
	}
	if err := os.Remove(keysPath); err != nil {
		t.Fatal(err)
	}
}

// socketAudit is the audit log at path without the lines of the commands
// run with serve stopped (a test's setup).
func socketAudit(path string) ([]auditEntry, error) {
	entries, _, err := readAudit(path)
	return slices.DeleteFunc(entries, func(e auditEntry) bool { return e.Via != viaSocket }), err
}
