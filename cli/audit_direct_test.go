package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
)

// auditRows is what "admin audit --json" shows of dataDir's audit log,
// each entry's time zeroed for comparison.
func auditRows(t *testing.T, dataDir string) []auditEntry {
	t.Helper()
	out, errOut, err := runCLI(t, "admin", "audit", "--json", "--data-dir", dataDir)
	if err != nil {
		t.Fatalf("admin audit: %v\n%s", err, errOut)
	}
	var rows []auditEntry
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("admin audit --json: %v\n%s", err, out)
	}
	for i := range rows {
		rows[i].Time = auditEntry{}.Time
	}
	return rows
}

// TestDirectAdminCommandsAudited: every admin command run with serve
// stopped that opened the data dir leaves one line in its audit log, via
// "direct", with its exit and error, a failed one too; a command refused
// before the data dir opened (tenant delete's --confirm) and admin audit
// itself leave none. The log stays owner-only and holds no credential's
// secret. Only tenant delete wrote its line before.
func TestDirectAdminCommandsAudited(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	scope := server.ScopeNames()[0]
	steps := []struct {
		args    []string
		exit    int
		err     string // the command's error; "" for none
		audited bool
	}{
		{[]string{"admin", "tenant", "create", "acme", "--sandbox"}, 0, "", true},
		{[]string{"admin", "credential", "create", "--tenant", "acme", "--name", "pos", "--scopes", scope, "--json"}, 0, "", true},
		{[]string{"admin", "tenant", "set", "acme", "--paused", "true"}, 0, "", true},
		{[]string{"admin", "tenant", "show", "nadie"}, 1, `no tenant "nadie"`, true},
		{[]string{"admin", "clock", "advance", "--tenant", "acme", "--by", "1d"}, 0, "", true},
		{[]string{"admin", "check"}, 0, "", true},
		{[]string{"admin", "tenant", "delete", "acme", "--confirm", "acm"}, 2, "exit status 2", false},
		{[]string{"admin", "audit"}, 0, "", false},
		{[]string{"admin", "tenant", "delete", "acme", "--confirm", "acme"}, 0, "", true},
	}
	var want []auditEntry
	var secrets []string
	for _, s := range steps {
		args := append(s.args, "--data-dir", dir)
		out, _, err := runCLI(t, args...)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if ExitCode(err) != s.exit || got != s.err {
			t.Fatalf("%v: exit %d %q, want exit %d %q", s.args, ExitCode(err), got, s.exit, s.err)
		}
		if s.args[1] == "credential" {
			var cred credJSON
			if err := json.Unmarshal([]byte(out), &cred); err != nil || cred.ClientSecret == "" {
				t.Fatalf("credential create: %v\n%s", err, out)
			}
			secrets = append(secrets, cred.ClientSecret)
		}
		if s.audited {
			want = append(want, auditEntry{UID: os.Getuid(), PID: os.Getpid(), Args: args, Exit: s.exit, Error: s.err, Via: "direct"})
		}
	}
	if diff := cmp.Diff(want, auditRows(t, dir)); diff != "" {
		t.Errorf("audit log of the commands run with serve stopped (-want +got):\n%s", diff)
	}
	path := filepath.Join(dir, auditFile)
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("audit log: %v %v; want mode 0600", info, err)
	}
	log, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if bytes.Contains(log, []byte(s)) {
			t.Errorf("the audit log holds the secret of the credential created")
		}
	}
	out, _, err := runCLI(t, "admin", "audit", "--last", "1", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "  via direct  admin tenant delete acme --confirm acme --data-dir "+dir+"  (exit 0)") {
		t.Errorf("admin audit --last 1: %v\n%s; want the deletion's line via direct", err, out)
	}
}

// TestDirectAuditUnwritable: a command run with serve stopped whose audit
// line cannot be written (here the log's path is a directory: as a data
// dir copied read-only, it refuses the append even to root) runs and exits
// as it would, its output whole, and warns on stderr that its line is not
// in the log.
func TestDirectAuditUnwritable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	if err := os.RemoveAll(filepath.Join(dir, auditFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, auditFile), 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		out  string // in stdout
		exit int
		err  string
	}{
		{[]string{"admin", "tenant", "list"}, "acme", 0, ""},
		{[]string{"admin", "check"}, "records checked", 0, ""},
		{[]string{"admin", "tenant", "show", "nadie"}, "", 1, `no tenant "nadie"`},
	}
	for _, tt := range tests {
		out, errOut, err := runCLI(t, append(tt.args, "--data-dir", dir)...)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if ExitCode(err) != tt.exit || got != tt.err || !strings.Contains(out, tt.out) {
			t.Errorf("%v: exit %d %q, stdout %q; want exit %d %q, stdout with %q", tt.args, ExitCode(err), got, out, tt.exit, tt.err, tt.out)
		}
		if !strings.Contains(errOut, "warning: this command's line in the admin audit log was not written: admin audit log") {
			t.Errorf("%v: stderr %q; want the audit log's warning", tt.args, errOut)
		}
	}
}

// TestSocketAuditVia: the commands run through serve's admin socket are
// audited via "socket", a failed one with its exit and error.
func TestSocketAuditVia(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	serveInProcess(t, dir)
	lines := []struct {
		args []string
		exit int
		err  string
	}{
		{[]string{"admin", "tenant", "create", "acme"}, 0, ""},
		{[]string{"admin", "tenant", "show", "nadie"}, 1, `no tenant "nadie"`},
	}
	var want []auditEntry
	for _, l := range lines {
		args := append(l.args, "--data-dir", dir)
		if r := runLine(t, args...); r.Exit != l.exit || r.Err != l.err {
			t.Fatalf("%v: %+v; want exit %d %q", l.args, r, l.exit, l.err)
		}
		want = append(want, auditEntry{UID: os.Getuid(), PID: os.Getpid(), Args: args, Exit: l.exit, Error: l.err, Via: "socket"})
	}
	if diff := cmp.Diff(want, auditRows(t, dir)); diff != "" {
		t.Errorf("audit log of the commands run through the socket (-want +got):\n%s", diff)
	}
}

// TestRestoreAudited: admin restore, which opens the data dir itself,
// leaves its line via "direct" in the audit log of the data dir it
// restored, or left as it was when it failed; a failed restore into a
// data dir it made removes that again, audit log and all.
func TestRestoreAudited(t *testing.T) {
	dir, data, backup := backedUpTenant(t)
	if err := os.RemoveAll(filepath.Join(data, auditFile)); err != nil { // the setup's lines
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-backup")
	restored := []string{"admin", "restore", "--from", backup, "--data-dir", data}
	failed := []string{"admin", "restore", "--from", missing, "--data-dir", data}
	if _, errOut, err := runCLI(t, restored...); err != nil {
		t.Fatalf("restore: %v\n%s", err, errOut)
	}
	_, _, ferr := runCLI(t, failed...)
	if ferr == nil {
		t.Fatal("restore of a missing backup: no error")
	}
	want := []auditEntry{
		{UID: os.Getuid(), PID: os.Getpid(), Args: restored, Via: "direct"},
		{UID: os.Getuid(), PID: os.Getpid(), Args: failed, Exit: 1, Error: ferr.Error(), Via: "direct"},
	}
	rows := auditRows(t, data)
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("audit log of admin restore (-want +got):\n%s", diff)
	}
	fresh := filepath.Join(dir, "fresh")
	if _, errOut, err := runCLI(t, "admin", "restore", "--from", missing, "--data-dir", fresh); err == nil || strings.Contains(errOut, "audit") {
		t.Errorf("restore of a missing backup into a new data dir: %v, stderr %q; want an error, no audit line tried", err, errOut)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("a failed restore into a new data dir left it: %v", err)
	}
}

// TestAuditShowsVia: admin audit shows how each command ran, and the lines
// of an earlier release, which have no "via", as they were.
func TestAuditShowsVia(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	log := `{"time":"2026-12-01T08:00:00Z","uid":1,"pid":10,"args":["admin","tenant","list"],"exit":0}
{"time":"2026-12-01T08:01:00Z","uid":1,"pid":11,"args":["admin","tenant","show","x"],"exit":1,"error":"no tenant \"x\"","via":"socket"}
{"time":"2026-12-01T08:02:00Z","uid":1,"pid":12,"args":["admin","check"],"exit":0,"via":"direct"}
`
	if err := os.WriteFile(filepath.Join(dir, auditFile), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "admin", "audit", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"2026-12-01T08:00:00Z  uid 1  pid 10  admin tenant list  (exit 0)",
		`2026-12-01T08:01:00Z  uid 1  pid 11  via socket  admin tenant show x  (exit 1: no tenant "x")`,
		"2026-12-01T08:02:00Z  uid 1  pid 12  via direct  admin check  (exit 0)",
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(out), "\n")); diff != "" {
		t.Errorf("admin audit (-want +got):\n%s", diff)
	}
	var vias []string
	for _, r := range auditRows(t, dir) {
		vias = append(vias, r.Via)
	}
	if diff := cmp.Diff([]string{"", "socket", "direct"}, vias); diff != "" {
		t.Errorf("admin audit --json: via (-want +got):\n%s", diff)
	}
}

// TestRestoreAuditUnderLock: admin restore writes its line holding the
// data dir's lock again; a process that took the lock once the restore
// released it (a serve that waited for it) keeps its log to itself, and
// the restore warns that its line is lost.
func TestRestoreAuditUnderLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	if err := os.RemoveAll(filepath.Join(dir, auditFile)); err != nil {
		t.Fatal(err)
	}
	args := []string{"admin", "restore", "--from", "b", "--data-dir", dir}
	tests := []struct {
		locked bool // another process holds the data dir's lock
		lines  int
		warn   string
	}{
		{true, 0, "in use by another coupond"},
		{false, 1, ""},
	}
	for _, tt := range tests {
		var lock io.Closer
		if tt.locked {
			var err error
			if lock, err = privacy.LockDataDir(dir); err != nil {
				t.Fatal(err)
			}
		}
		var errOut bytes.Buffer
		cmd := &cobra.Command{}
		cmd.SetErr(&errOut)
		auditRestore(cmd, &app{args: args, dataDir: dir}, nil)
		if lock != nil {
			lock.Close()
		}
		entries, _, err := readAudit(filepath.Join(dir, auditFile))
		if err != nil || len(entries) != tt.lines || (tt.warn == "") != (errOut.Len() == 0) || !strings.Contains(errOut.String(), tt.warn) {
			t.Errorf("locked %v: %d lines %v, stderr %q; want %d lines, a warning with %q", tt.locked, len(entries), err, errOut.String(), tt.lines, tt.warn)
		}
	}
}
