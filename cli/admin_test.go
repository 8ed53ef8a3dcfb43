package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// TestTenantSetRejectsBadValues: every bad value of admin tenant set is an
// error naming its flag, NaN and spans past a year included, and leaves the
// tenant's settings as they were.
func TestTenantSetRejectsBadValues(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	settings := func() map[string]any {
		var v struct {
			Settings map[string]any `json:"settings"`
		}
		if err := json.Unmarshal(runIn(t, dir, "admin", "tenant", "show", "acme", "--json"), &v); err != nil {
			t.Fatal(err)
		}
		return v.Settings
	}
	before := settings()
	for _, args := range [][]string{
		{"--control-share", "NaN"}, {"--control-share", "0.6"}, {"--control-share", "-0.1"},
		{"--optout-penalty-mxn", "NaN"}, {"--optout-penalty-mxn", "-1"}, {"--optout-penalty-mxn", "+Inf"},
		{"--optout-penalty-mxn", "1.234"}, {"--optout-penalty-mxn", "0.005"}, // more than cents: it was rounded silently
		{"--reward-window", "366d"}, {"--reward-window", "100000d"}, {"--reward-window", "30m"},
		{"--reward-grace", "366d"}, {"--reward-grace", "-1d"},
		{"--control-kind", "todos"}, {"--paused", "maybe"}, {"--shadow", "yes"}, {"--quota-events-day", "-1"},
	} {
		_, _, err := runCLI(t, append([]string{"admin", "tenant", "set", "acme", "--data-dir", dir}, args...)...)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("tenant set %v: %v; want an error naming %s", args, err, args[0])
		}
	}
	if diff := cmp.Diff(before, settings()); diff != "" {
		t.Errorf("rejected values changed the settings (-before +after):\n%s", diff)
	}
	runIn(t, dir, "admin", "tenant", "set", "acme", "--reward-window", "365d", "--reward-grace", "0d", "--optout-penalty-mxn", "12.5")
	if s := settings(); s["reward_window"] != "365d" || s["optout_penalty_mxn"] != 12.5 {
		t.Errorf("the bounds themselves: %v", s)
	}
	for _, cents := range []string{"0.29", "1.01", "1000000000", "0"} { // none a float's 100× puts off a whole cent
		runIn(t, dir, "admin", "tenant", "set", "acme", "--optout-penalty-mxn", cents)
		want, err := strconv.ParseFloat(cents, 64)
		if got := settings()["optout_penalty_mxn"]; err != nil || got != want {
			t.Errorf("--optout-penalty-mxn %s: stored %v", cents, got)
		}
	}
}

// TestClockAdvanceStopsBefore2262: a sandbox clock does not move past the
// date whose derived times (a year's reward window and a year's grace)
// would leave the range store keys hold in order (store.LastKeyTime); the
// refusal says so and leaves the clock.
func TestClockAdvanceStopsBefore2262(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "sb", "--sandbox")
	runIn(t, dir, "admin", "clock", "advance", "--tenant", "sb", "--by", "84000d") // to 2256
	_, _, err := runCLI(t, "admin", "clock", "advance", "--tenant", "sb", "--by", "5000d", "--data-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "the clock would pass 2260-01-01") {
		t.Fatalf("advancing past 2260: %v", err)
	}
	var clock struct {
		Now time.Time `json:"now"`
	}
	if err := json.Unmarshal(runIn(t, dir, "admin", "clock", "show", "--tenant", "sb", "--json"), &clock); err != nil {
		t.Fatal(err)
	}
	if clock.Now.After(store.LastSandboxClock()) || clock.Now.Year() != 2256 {
		t.Errorf("clock after the refusal: %v", clock.Now)
	}
}

// acmeCredential creates, in a new data dir (returned), tenant acme and a
// credential "crm" for it with scope eventos:publicar.
func acmeCredential(t *testing.T) (string, credJSON) {
	t.Helper()
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	var cred credJSON
	if err := json.Unmarshal(runIn(t, dir, "admin", "credential", "create", "--tenant", "acme", "--name", "crm", "--scopes", "eventos:publicar", "--json"), &cred); err != nil {
		t.Fatal(err)
	}
	return dir, cred
}

// TestCredentialRotateGraceBounded: the old secret's grace is 0 to 90 days;
// a longer one, which would leave the old secret working for years, is an
// error naming --grace and rotates nothing.
func TestCredentialRotateGraceBounded(t *testing.T) {
	dir, cred := acmeCredential(t)
	for _, g := range []string{"91d", "100000d", "-1h", "NaN"} {
		if _, _, err := runCLI(t, "admin", "credential", "rotate", cred.ClientID, "--grace", g, "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "--grace") {
			t.Errorf("rotate --grace %s: %v; want an error naming --grace", g, err)
		}
	}
	out := runIn(t, dir, "admin", "credential", "rotate", cred.ClientID, "--grace", "90d", "--json")
	var rot struct {
		Until time.Time `json:"previous_secret_valid_until"`
	}
	if err := json.Unmarshal(out, &rot); err != nil || time.Until(rot.Until) > 91*24*time.Hour {
		t.Errorf("rotate --grace 90d: %s, %v", out, err)
	}
}

// TestCredentialRotateSaysOldSecretFate: rotate's output says until when
// the old secret and its tokens work, and with --grace 0 (a leaked secret)
// that they no longer do, rather than "works until" the command's own time.
func TestCredentialRotateSaysOldSecretFate(t *testing.T) {
	dir, cred := acmeCredential(t)
	tests := []struct{ grace, want string }{
		{"0", "The old secret, and every token obtained with it, no longer work."},
		{"1h", "The old secret, and the tokens obtained with it, work until "},
	}
	for _, tc := range tests {
		if out := string(runIn(t, dir, "admin", "credential", "rotate", cred.ClientID, "--grace", tc.grace)); !strings.Contains(out, tc.want) {
			t.Errorf("rotate --grace %s:\n%s\nwant it to say %q", tc.grace, out, tc.want)
		}
	}
}

// TestConsoleAuditLast: --last below 1 is an error naming it (-5 panicked:
// a negative slice bound).
func TestConsoleAuditLast(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	for _, v := range []string{"-5", "0"} {
		if _, _, err := runCLI(t, "admin", "console", "audit", "--last", v, "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "--last") {
			t.Errorf("console audit --last %s: %v; want an error naming --last", v, err)
		}
	}
}

// TestConsoleAuditUnknownTenant: --tenant naming no tenant is an error that
// names it, as in every other admin command; it listed nothing and exited
// 0, so a typo read as "no console action on this tenant".
func TestConsoleAuditUnknownTenant(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	runIn(t, dir, "admin", "console", "audit", "--tenant", "acme")
	if _, _, err := runCLI(t, "admin", "console", "audit", "--tenant", "acmee", "--data-dir", dir); err == nil || err.Error() != `no tenant "acmee"` {
		t.Errorf("console audit --tenant acmee: %v; want no tenant \"acmee\"", err)
	}
}

// TestExecuteRecovered: a command that panics inside serve's admin socket
// ends with an error that says so, and the panic is logged with its stack.
func TestExecuteRecovered(t *testing.T) {
	var logs bytes.Buffer
	root := &cobra.Command{Use: "coupond", SilenceErrors: true, SilenceUsage: true}
	root.AddCommand(&cobra.Command{Use: "boom", RunE: func(*cobra.Command, []string) error {
		var s []int
		_ = s[len(s)-1]
		return nil
	}})
	root.SetArgs([]string{"boom"})
	err := executeRecovered(context.Background(), root, zerolog.New(&logs))
	if err == nil || !strings.Contains(err.Error(), "internal error in the admin command") {
		t.Errorf("error = %v", err)
	}
	if s := logs.String(); !strings.Contains(s, `"level":"error"`) || !strings.Contains(s, "admin command panicked") || !strings.Contains(s, "goroutine") {
		t.Errorf("log: %s", s)
	}
}

// TestAbuseNamesUnknown: abuse show of an unknown tenant and abuse clear of
// an unknown credential say so, as every other admin command does (they
// answered "no escalation recorded" and "not escalated"); so does batch
// watch of an unknown tenant (it said the tenant had no such job), and it
// refuses an --interval that is not positive.
func TestAbuseNamesUnknown(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "abuse", "show", "--tenant", "nope"}, `no tenant "nope"`},
		{[]string{"admin", "abuse", "clear", "ci_nope"}, `no credential "ci_nope"`},
		{[]string{"admin", "batch", "watch", "--tenant", "nope", "lote_x"}, `no tenant "nope"`},
		{[]string{"admin", "batch", "watch", "--tenant", "acme", "lote_x"}, `tenant "acme" has no batch job "lote_x"`},
		{[]string{"admin", "batch", "watch", "--tenant", "acme", "--interval", "0s", "lote_x"}, `--interval: want 100ms to 1h0m0s, got 0s`},
	} {
		if _, _, err := runCLI(t, append(tc.args, "--data-dir", dir)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %s", tc.args, err, tc.want)
		}
	}
	if out := runIn(t, dir, "admin", "abuse", "show", "--tenant", "acme"); !bytes.Contains(out, []byte("no escalation recorded")) {
		t.Errorf("abuse show of a known tenant: %s", out)
	}
}

// plantAbuseStates stores, with the server stopped, the escalation state of
// each credential in levels (client id: level, as the server stores it),
// one step recorded at at.
func plantAbuseStates(t *testing.T, dataDir, tenant string, levels map[string]int, at time.Time) {
	t.Helper()
	db, err := store.Open(filepath.Join(dataDir, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	names := []string{"normal", "aviso", "freno", "cuarentena", "suspension"}
	for id, level := range levels {
		v, err := json.Marshal(map[string]any{"client_id": id, "level": level,
			"steps": []map[string]any{{"at": at, "level": names[level], "reason": "pico"}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.PutAbuseState(tenant, id, v); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAbuseJSONNamesLevels: admin abuse show --json and clear --json give
// each credential's level by its step's name, as the text does and as
// its steps record it (they gave the stored number: "level": 2), and show
// lists the credentials by client id (it gave the server's map order,
// different from run to run).
func TestAbuseJSONNamesLevels(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	var cred credJSON
	if err := json.Unmarshal(runIn(t, dir, "admin", "credential", "create", "--tenant", "acme", "--name", "pos", "--scopes", "eventos:publicar", "--json"), &cred); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	levels := map[string]int{cred.ClientID: 3}
	for i, id := range []string{"ci_h", "ci_c", "ci_f", "ci_a", "ci_g", "ci_b", "ci_e", "ci_d"} {
		levels[id] = 1 + i%4
	}
	plantAbuseStates(t, dir, "acme", levels, at)
	var shown struct {
		Credentials []abuseView `json:"credentials"`
	}
	if err := json.Unmarshal(runIn(t, dir, "admin", "abuse", "show", "--tenant", "acme", "--json"), &shown); err != nil {
		t.Fatal(err)
	}
	var want []abuseView
	for _, id := range slices.Sorted(maps.Keys(levels)) {
		name := []string{"normal", "aviso", "freno", "cuarentena", "suspension"}[levels[id]]
		want = append(want, abuseView{ClientID: id, Level: name, Steps: []server.AbuseStep{{At: at, Level: name, Reason: "pico"}}})
	}
	if diff := cmp.Diff(want, shown.Credentials); diff != "" {
		t.Errorf("abuse show --json credentials (-want +got):\n%s", diff)
	}
	var cleared abuseView
	if err := json.Unmarshal(runIn(t, dir, "admin", "abuse", "clear", cred.ClientID, "--json"), &cleared); err != nil {
		t.Fatal(err)
	}
	if cleared.Level != "normal" || len(cleared.Steps) != 2 || cleared.Steps[1].Level != "normal" {
		t.Errorf("abuse clear --json: %+v; want level normal and the clearance as its last step", cleared)
	}
}

// TestRestoreRefusesDamagedBackup: a backup whose store lost a file, or
// had one cut short, since its manifest is refused before the data dir is
// touched (a missing file failed inside Pebble after keys.json was
// written); the intact copy restores.
func TestRestoreRefusesDamagedBackup(t *testing.T) {
	dir, _, backup := backedUpTenant(t)
	files, err := filepath.Glob(filepath.Join(backup, "db", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("backup files: %v %v", files, err)
	}
	sort.Slice(files, func(i, j int) bool { return fileSize(t, files[i]) > fileSize(t, files[j]) })
	big := files[0]
	orig, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func() error{
		"a file cut short": func() error { return os.WriteFile(big, orig[:len(orig)/2], 0o600) },
		"a file missing":   func() error { return os.Remove(big) },
	} {
		if err := damage(); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "restored")
		_, _, err := runCLI(t, "admin", "restore", "--from", backup, "--data-dir", target)
		if err == nil || !strings.Contains(err.Error(), "is damaged") {
			t.Errorf("%s: restore = %v, want a refusal that says the backup is damaged", name, err)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("%s: the refused restore created %s", name, target)
		}
	}
	if err := os.WriteFile(big, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	runIn(t, filepath.Join(dir, "restored"), "admin", "restore", "--from", backup)
}

// TestChangedKeysRefused: keys.json with one base64 character of its hash
// key changed in place (a bad sector, an edit) still reads as four 32-byte
// keys; the data dir is refused, saying to put back the backup's copy,
// instead of serving with keys that void every decision id and token and
// no longer match the customer hashes of deletion records. The backup's
// keys.json opens it again.
func TestChangedKeysRefused(t *testing.T) {
	_, data, backup := backedUpTenant(t)
	path := filepath.Join(data, store.SecretsFile)
	keys, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(keys, []byte(`"hash":"`)) + len(`"hash":"`) + 5
	changed := bytes.Clone(keys)
	changed[i] = 'A' // another base64 letter
	if keys[i] == 'A' {
		changed[i] = 'B'
	}
	if err := os.WriteFile(path, changed, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCLI(t, "admin", "tenant", "list", "--data-dir", data)
	if err == nil || !strings.Contains(err.Error(), "does not hold the keys this store was written with") ||
		!strings.Contains(err.Error(), "put back the keys.json of the latest backup") {
		t.Errorf("admin tenant list with a changed key: %v, want a refusal that says to put back the backup's keys.json", err)
	}
	saved, err := os.ReadFile(filepath.Join(backup, store.SecretsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := runIn(t, data, "admin", "tenant", "list"); !bytes.Contains(out, []byte("acme")) {
		t.Errorf("admin tenant list with the backup's keys.json: %s, want acme", out)
	}
}

// TestRestoreOverDamagedKeys: a keys.json that no longer decodes (cut
// short) makes the data dir refuse to open, advising to restore the latest
// backup; that restore goes through, putting the backup's keys.json in its
// place, instead of refusing the backup as another installation's.
func TestRestoreOverDamagedKeys(t *testing.T) {
	_, data, backup := backedUpTenant(t)
	path := filepath.Join(data, store.SecretsFile)
	keys, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, keys[:len(keys)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "admin", "tenant", "list", "--data-dir", data); err == nil || !strings.Contains(err.Error(), "or restore that backup") {
		t.Fatalf("admin tenant list with keys.json cut short: %v, want the advice to restore the backup", err)
	}
	runIn(t, data, "admin", "restore", "--from", backup)
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, keys) {
		t.Errorf("keys.json after the restore: %q %v, want the backup's", got, err)
	}
	if out := runIn(t, data, "admin", "tenant", "list"); !bytes.Contains(out, []byte("acme")) {
		t.Errorf("admin tenant list after the restore: %s, want acme", out)
	}
}

// backedUpTenant makes a data dir with tenant acme and a backup of it
// under a temporary dir, and returns the three paths.
func backedUpTenant(t *testing.T) (dir, data, backup string) {
	t.Helper()
	dir = t.TempDir()
	data, backup = filepath.Join(dir, "data"), filepath.Join(dir, "backup")
	runIn(t, data, "admin", "tenant", "create", "acme")
	runIn(t, data, "admin", "backup", "--out", backup)
	return dir, data, backup
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// TestInterruptedRestoreRefused: a data dir a restore stopped in between
// its two renames (db moved to db.replaced, db.restoring not yet db) is
// refused by admin commands and serve, which would otherwise create an
// empty store and start with no data; running the restore again mends it.
func TestInterruptedRestoreRefused(t *testing.T) {
	_, data, backup := backedUpTenant(t)
	if err := os.Rename(filepath.Join(data, "db"), filepath.Join(data, "db.replaced")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(data, "db.restoring"), 0o700); err != nil {
		t.Fatal(err)
	}
	const want = "a restore stopped before it finished"
	if _, _, err := runCLI(t, "admin", "tenant", "list", "--data-dir", data); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("admin tenant list: %v; want %q", err, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a serve that starts stops here
	err := Run(ctx, []string{"serve", "--data-dir", data, "--addr", "127.0.0.1:0", "--console-addr", ""}, nil, io.Discard, io.Discard)
	cancel()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("serve: %v; want %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(data, "db")); !os.IsNotExist(err) {
		t.Errorf("a refused command created db (stat: %v)", err)
	}
	runIn(t, data, "admin", "restore", "--from", backup)
	if out := runIn(t, data, "admin", "tenant", "list"); !bytes.Contains(out, []byte("acme")) {
		t.Errorf("tenant list after the restore ran again: %s", out)
	}
	for _, left := range []string{"db.replaced", "db.restoring"} {
		if _, err := os.Stat(filepath.Join(data, left)); !os.IsNotExist(err) {
			t.Errorf("%s left behind after the restore ran again (stat: %v)", left, err)
		}
	}
}

// TestInterruptedRestoreAdvice: the refusal of a data dir a restore
// stopped in says how to go back only with what is there. A restore into
// a new data dir that stopped while copying leaves db.restoring and no
// db.replaced (no store was replaced): the refusal told the operator to
// move db.replaced back to db, a path that does not exist.
func TestInterruptedRestoreAdvice(t *testing.T) {
	for _, tc := range []struct {
		name     string
		left     []string // directories the stopped restore left, no db
		want     []string
		notWants []string
	}{
		{"between the renames", []string{"db.replaced", "db.restoring"},
			[]string{"run the same 'coupond admin restore --from BACKUP' again", "db.replaced back to db"}, nil},
		{"copying into a new data dir", []string{"db.restoring", "results.restoring"},
			[]string{"run the same 'coupond admin restore --from BACKUP' again", "replaced no store", "remove "},
			[]string{"db.replaced"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			for _, dir := range tc.left {
				if err := os.MkdirAll(filepath.Join(data, dir), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := runCLI(t, "admin", "tenant", "list", "--data-dir", data)
			if err == nil {
				t.Fatal("admin tenant list: nil error; want the data dir refused")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q; want it to hold %q", err, want)
				}
			}
			for _, notWant := range tc.notWants {
				if strings.Contains(err.Error(), notWant) {
					t.Errorf("refusal %q; want no %q (not there)", err, notWant)
				}
			}
		})
	}
}

// TestTenantCreateRefusesBadIDFirst: a tenant id that is not one is refused
// naming the id and its form before the data dir is touched; the refusal
// created a data dir (keys and an empty store) where none was.
func TestTenantCreateRefusesBadIDFirst(t *testing.T) {
	for _, id := range []string{"", "Acme", "a b", "ñandú", strings.Repeat("a", 33)} {
		dir := filepath.Join(t.TempDir(), "data")
		_, _, err := runCLI(t, "admin", "tenant", "create", id, "--data-dir", dir)
		if err == nil || !strings.Contains(err.Error(), "invalid tenant id") || !strings.Contains(err.Error(), "a-z 0-9") {
			t.Errorf("tenant create %q: %v; want an error naming the tenant id's form", id, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("tenant create %q: the refused create made %s (stat: %v)", id, dir, err)
		}
	}
}

// TestAuditRefusesMissingDataDir: admin audit pointed at a data dir that
// does not exist fails naming it, as every other admin command does; it
// answered "no admin commands run through the socket yet" (and [] with
// --json), exit 0, for a mistyped --data-dir.
func TestAuditRefusesMissingDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	for _, args := range [][]string{{"admin", "audit"}, {"admin", "audit", "--json"}} {
		out, _, err := runCLI(t, append(args, "--data-dir", dir)...)
		if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "--data-dir") || out != "" {
			t.Errorf("%v: %v, stdout %q; want an error naming the missing data dir", args, err, out)
		}
	}
	dir = t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	if err := os.Remove(filepath.Join(dir, auditFile)); err != nil { // rotated away
		t.Fatal(err)
	}
	if out := runIn(t, dir, "admin", "audit", "--json"); strings.TrimSpace(string(out)) != "[]" {
		t.Errorf("audit of a data dir without an audit log: %s", out)
	}
}

// TestCredentialNameIsText: --name is 1 to 128 characters of text. Control
// characters (an escape sequence, a newline, a tab) were stored and then
// written raw to the operator's terminal by credential list, where they
// recolour or forge lines of the table; invalid UTF-8 too. The length
// counted bytes, so 100 accented letters were refused as too long.
// Bidirectional controls (a right-to-left override, an isolate) passed:
// printed, they reorder the rest of the listing's row.
func TestCredentialNameIsText(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	for _, name := range []string{"", "  ", "crm\x1b[31m", "crm\nci_fake  admin  active", "a\tb", "a\x00b", "a\x7fb", "caf\xe9", strings.Repeat("ñ", 129),
		"crm\u202eevitca", "crm\u2067x", "a\u200fb"} {
		_, _, err := runCLI(t, "admin", "credential", "create", "--tenant", "acme", "--name", name, "--scopes", "eventos:publicar", "--data-dir", dir)
		if err == nil || !strings.Contains(err.Error(), "--name") {
			t.Errorf("credential create --name %q: %v; want an error naming --name", name, err)
		}
	}
	for _, name := range []string{strings.Repeat("ñ", 128), "Caja 3 · Sucursal Centro"} {
		runIn(t, dir, "admin", "credential", "create", "--tenant", "acme", "--name", name, "--scopes", "eventos:publicar")
	}
	if out := runIn(t, dir, "admin", "credential", "list", "--tenant", "acme"); strings.Count(string(out), "\n") != 3 {
		t.Errorf("credential list: %s", out)
	}
}

// TestTenantSetWithoutSettings: admin tenant set without a setting to
// change is an error that lists them; it printed the tenant and exited 0,
// so a line that lost its flags (a shell variable that expanded to
// nothing) read as a change made.
func TestTenantSetWithoutSettings(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	for _, args := range [][]string{{"acme"}, {"acme", "--json"}} {
		out, _, err := runCLI(t, append(append([]string{"admin", "tenant", "set"}, args...), "--data-dir", dir)...)
		if err == nil || !strings.Contains(err.Error(), "--shadow") || out != "" {
			t.Errorf("tenant set %v: %v, stdout %q; want an error listing the settings", args, err, out)
		}
	}
	if _, _, err := runCLI(t, "admin", "tenant", "set", "nope", "--data-dir", dir); err == nil {
		t.Error("tenant set of an unknown tenant without settings succeeded")
	}
	runIn(t, dir, "admin", "tenant", "set", "acme", "--shadow", "on")
}

// TestTenantSetShowsWarnings: admin tenant set answers with the tenant as
// tenant show prints it, its open warnings included. It printed
// "warnings: none" (and "warnings":[]) for a tenant it had just paused,
// and the console's pause action shows this output as its result.
func TestTenantSetShowsWarnings(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	const paused = "tenant paused: every API call answers 503 inquilino_pausado"
	text := string(runIn(t, dir, "admin", "tenant", "set", "acme", "--paused", "true"))
	if !strings.Contains(text, "warnings:\n  - "+paused) || strings.Contains(text, "warnings: none") {
		t.Errorf("tenant set --paused true printed:\n%s\nwant its warning %q", text, paused)
	}
	var v struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(runIn(t, dir, "admin", "tenant", "set", "acme", "--shadow", "on", "--json"), &v); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{paused}, v.Warnings); diff != "" {
		t.Errorf("tenant set --json warnings (-want +got):\n%s", diff)
	}
	shown := string(runIn(t, dir, "admin", "tenant", "show", "acme"))
	if set := string(runIn(t, dir, "admin", "tenant", "set", "acme", "--shadow", "on")); !strings.HasSuffix(set, shown[strings.Index(shown, "warnings:"):]) {
		t.Errorf("tenant set's warnings differ from tenant show's:\n%s\n---\n%s", set, shown)
	}
}

// TestRestoreLeftoversRemovedAtOpen: a restore that stopped (a crash, a
// kill) with the data dir's store in place leaves staging or replaced
// copies of stores and results that hold customers' data, maybe of
// customers deleted since, which nothing else removes until another
// restore. serve and the admin commands that open the data dir remove them
// (TestInterruptedRestoreRefused covers a store not in place); a restore
// still running keeps its staging: the data dir is refused instead.
func TestRestoreLeftoversRemovedAtOpen(t *testing.T) {
	const canary = "ana-canary-0001"
	for _, tc := range []struct {
		name string
		left []string
	}{
		{"stopped while staging", []string{"db.restoring", "results.restoring"}},
		{"stopped after the swap", []string{"db.replaced", "results.replaced"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, data, _ := backedUpTenant(t)
			for _, dir := range tc.left {
				if err := os.MkdirAll(filepath.Join(data, dir, "acme"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(data, dir, "acme", "000001.sst"), []byte(canary), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if out := runIn(t, data, "admin", "tenant", "list"); !bytes.Contains(out, []byte("acme")) {
				t.Errorf("tenant list: %s", out)
			}
			for _, dir := range tc.left {
				if _, err := os.Stat(filepath.Join(data, dir)); !os.IsNotExist(err) {
					t.Errorf("%s, left by a restore that stopped, is still there after the data dir was opened (stat: %v)", dir, err)
				}
			}
		})
	}
	t.Run("restore running", func(t *testing.T) {
		_, data, backup := backedUpTenant(t)
		ctx := context.Background()
		opened := errors.New("not tried")
		open := func(ctx context.Context, db *store.DB, s *store.Secrets, results string) (*privacy.Service, privacy.DeletionHooks, error) {
			e, err := openEnv(ctx, data, zerolog.Nop(), serviceOptions{})
			if err == nil {
				e.close()
			}
			opened = err
			if _, err := os.Stat(filepath.Join(data, "db.restoring")); err != nil {
				t.Errorf("the running restore's staging store is gone once the data dir was opened beside it: %v", err)
			}
			return stagingOpener(data, time.Now)(ctx, db, s, results)
		}
		if _, err := privacy.NewBackups(data, time.Now, zerolog.Nop()).Restore(ctx, backup, open, io.Discard); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if opened == nil || !strings.Contains(opened.Error(), "in use") {
			t.Errorf("data dir opened while a restore ran in it: %v; want it refused as in use", opened)
		}
	})
}

// TestParseDaysRange: a duration beyond time.Duration's range, or days
// that are not a finite number, is an error that names the value; it never
// wraps around to a negative (or small) duration.
func TestParseDaysRange(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"7d", 7 * 24 * time.Hour, ""},
		{"1d12h", 36 * time.Hour, ""},
		{"106751d", 106751 * 24 * time.Hour, ""},
		{"106752d", 0, `duration "106752d" is too long`},
		{"2000000d", 0, `duration "2000000d" is too long`},
		{"-2000000d", 0, `duration "-2000000d" is too long`},
		{"106751d24h", 0, `duration "106751d24h" is too long`},
		{"NaNd", 0, `bad duration "NaNd"`},
		{"Infd", 0, `bad duration "Infd"`},
		{"1dx", 0, `bad duration "1dx"`},
		{"1.5d", 36 * time.Hour, ""},
		{"-1d", -24 * time.Hour, ""},
		{"1d-1h", 0, `bad duration "1d-1h"`},
		{"1d+1h", 0, `bad duration "1d+1h"`},
		{"+7d", 0, `bad duration "+7d"`},
		{"1_0d", 0, `bad duration "1_0d"`},
		{"0x1p3d", 0, `bad duration "0x1p3d"`},
		{"1e1d", 0, `bad duration "1e1d"`},
		{".5d", 0, `bad duration ".5d"`},
		{"d", 0, `bad duration "d"`},
	} {
		got, err := parseDays(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseDays(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseDays(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	_, _, err := runCLI(t, "admin", "clock", "advance", "--tenant", "sb", "--by", "2000000d", "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--by: duration \"2000000d\" is too long") {
		t.Errorf("clock advance --by 2000000d: %v", err)
	}
}

// TestEmptyPathFlags: an empty --data-dir (or COUPOND_DATA_DIR set empty),
// --out or --from is an error naming the flag: --out and --from read as
// the working directory (a backup written into it when empty), and
// --data-dir failed with "mkdir : no such file or directory". Commands
// that do not use the data dir ignore an empty one.
func TestEmptyPathFlags(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"admin", "tenant", "create", "acme", "--data-dir", ""}, want: "--data-dir: want a directory"},
		{args: []string{"admin", "tenant", "list"}, env: "COUPOND_DATA_DIR", want: "--data-dir: want a directory"},
		{args: []string{"serve", "--data-dir=", "--addr", "127.0.0.1:0", "--console-addr", ""}, want: "--data-dir: want a directory"},
		{args: []string{"admin", "backup", "--out", "", "--data-dir", dir}, want: "--out: want the backup's directory"},
		{args: []string{"admin", "restore", "--from", "", "--data-dir", dir}, want: "--from: want a backup's directory"},
	} {
		if tc.env != "" {
			t.Setenv(tc.env, "")
		}
		_, _, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %s: %v; want an error containing %q", tc.args, tc.env, err, tc.want)
		}
	}
	if entries, err := os.ReadDir(cwd); err != nil || len(entries) != 0 {
		t.Errorf("the working directory holds %v (%v), want nothing", entries, err)
	}
	if _, _, err := runCLI(t, "version", "--data-dir", ""); err != nil {
		t.Errorf("version with an empty --data-dir: %v", err)
	}
}

// TestBackupOutErrorNamesFlag: a backup directory that cannot be made (a
// file on its way; for an operator, more often a directory without
// permission) is an error naming --out, not a bare "mkdir …: not a
// directory".
func TestBackupOutErrorNamesFlag(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{file, filepath.Join(file, "sub")} {
		_, _, err := runCLI(t, "admin", "backup", "--out", out, "--data-dir", dir)
		if err == nil || !strings.HasPrefix(err.Error(), "--out "+out+": ") {
			t.Errorf("--out %s: %v; want an error starting with --out and the path", out, err)
		}
	}
}

// TestTenantSetShadowOnRecordsWhen: switching shadow mode on records the
// tenant's time (Settings.ShadowSince), from which the shadow report counts
// the coupons that should carry a decision_id; --shadow on while on keeps
// it, and on again after off moves it.
func TestTenantSetShadowOnRecordsWhen(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "sb", "--sandbox")
	// read returns the tenant's ShadowSince and its clock.
	read := func() (since, clock time.Time) {
		t.Helper()
		db, err := store.Open(filepath.Join(dir, "db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tn, _ := db.Tenant("sb")
		return tn.Settings.ShadowSince, tn.ClockNow
	}
	runIn(t, dir, "admin", "clock", "advance", "--tenant", "sb", "--by", "3d")
	runIn(t, dir, "admin", "tenant", "set", "sb", "--shadow", "on")
	first, clock := read()
	if !first.Equal(clock) || first.IsZero() {
		t.Fatalf("shadow on: since %v, want the tenant's clock %v", first, clock)
	}
	runIn(t, dir, "admin", "clock", "advance", "--tenant", "sb", "--by", "1d")
	runIn(t, dir, "admin", "tenant", "set", "sb", "--shadow", "on")
	if got, _ := read(); !got.Equal(first) {
		t.Errorf("shadow on while on: since %v, want %v kept", got, first)
	}
	runIn(t, dir, "admin", "tenant", "set", "sb", "--shadow", "off")
	runIn(t, dir, "admin", "clock", "advance", "--tenant", "sb", "--by", "1d")
	runIn(t, dir, "admin", "tenant", "set", "sb", "--shadow", "on")
	if got, clock := read(); !got.Equal(clock) || got.Equal(first) {
		t.Errorf("shadow on again: since %v, want %v", got, clock)
	}
}

// TestAuditLast: admin audit shows the latest --last entries of a log that
// is kept for good, and says on stderr how many it left out; it printed the
// whole file (136 KB after 770 commands).
func TestAuditLast(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	var log []byte
	for i := range 5 {
		line, err := json.Marshal(auditEntry{Time: time.Date(2026, 12, 6, 8, i, 0, 0, time.UTC), UID: 1, PID: 10 + i, Args: []string{"tenant", "show", "acme"}})
		if err != nil {
			t.Fatal(err)
		}
		log = append(append(log, line...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, auditFile), log, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runCLI(t, "admin", "audit", "--last", "2", "--json", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	var shown []auditEntry
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range shown {
		pids = append(pids, e.PID)
	}
	if diff := cmp.Diff([]int{13, 14}, pids); diff != "" || !strings.Contains(errOut, "latest 2 of 5") {
		t.Errorf("admin audit --last 2: pids (-want +got):\n%s\nstderr %q", diff, errOut)
	}
	for _, v := range []string{"0", "-1"} {
		if _, _, err := runCLI(t, "admin", "audit", "--last", v, "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "--last") {
			t.Errorf("--last %s: %v, want an error naming --last", v, err)
		}
	}
}

// TestTenantSetLogsSettings: the "tenant settings changed" log line names
// the settings the command gave, with their values (givenSettings), so the
// server's log says what changed; before it named only the tenant.
func TestTenantSetLogsSettings(t *testing.T) {
	f := pflag.NewFlagSet("set", pflag.ContinueOnError)
	var sf tenantSetFlags
	sf.register(f)
	if err := f.Parse([]string{"--paused", "true", "--control-share", "0.2", "--reward-window", "28d"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"control-share=0.2", "paused=true", "reward-window=28d"}
	if diff := cmp.Diff(want, givenSettings(f)); diff != "" {
		t.Errorf("given settings (-want +got):\n%s", diff)
	}
}

// TestAnySettingRefusesNone: "admin tenant set" with no setting given is
// refused naming the settings; one given is enough.
func TestAnySettingRefusesNone(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		refuse bool
	}{{nil, true}, {[]string{"--paused", "true"}, false}} {
		f := pflag.NewFlagSet("set", pflag.ContinueOnError)
		var sf tenantSetFlags
		sf.register(f)
		if err := f.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := anySetting(f)
		if got := err != nil && strings.Contains(err.Error(), "--paused"); got != tc.refuse {
			t.Errorf("%v: %v, want refused %v", tc.args, err, tc.refuse)
		}
	}
}
