//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/internal/syncbuf"
	"github.com/coupond/coupond/store"
)

// keysAPI is a data dir opened as serve opens it (openEnv), its API on an
// httptest server and, when it serves the admin socket, the commands run
// on the command line go through it.
type keysAPI struct {
	e    *env
	http *httptest.Server
	log  *syncbuf.Buffer
}

// openKeysAPI opens dir as serve does; withSocket also serves its admin
// socket. close ends both.
func openKeysAPI(t *testing.T, dir string, withSocket bool) *keysAPI {
	t.Helper()
	log := &syncbuf.Buffer{}
	e, err := openEnv(context.Background(), dir, zerolog.New(log), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.svc.ready.Store(true)
	k := &keysAPI{e: e, http: httptest.NewServer(e.svc.api), log: log}
	if withSocket {
		srv, err := serveAdmin(context.Background(), filepath.Join(dir, adminSocket), e)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
	}
	t.Cleanup(k.close)
	return k
}

func (k *keysAPI) close() {
	if k.e != nil {
		k.http.Close()
		k.e.close()
		k.e = nil
	}
}

// token asks the API for a token of the credential; "" when refused.
func (k *keysAPI) token(t *testing.T, id, secret string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}
	resp, err := http.PostForm(k.http.URL+"/v1/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&body) != nil {
		t.Fatalf("token: %s", resp.Status)
	}
	return body.AccessToken
}

// call is the status and codigo of an API call with tok: the job status of
// a job that does not exist (404 no_encontrado once authenticated).
func (k *keysAPI) call(t *testing.T, tok string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", k.http.URL+"/v1/lotes-decision/lote_none", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Codigo string }
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.Status[:3] + " " + body.Codigo
}

// link signs a result link of job lote_x for credential id, as the job's
// status does; verify checks one as its download does (the signature
// only: "ok" or the error's sentinel).
func (k *keysAPI) link(id string) string {
	return k.e.svc.batch.Signer.Sign(batch.Grant{Tenant: "acme", JobID: "lote_x", ClientID: id}, time.Now().Add(time.Hour))
}

func (k *keysAPI) verify(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.e.svc.batch.Signer.Verify("GET", u.Path, u.RawQuery, time.Now())
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, batch.ErrURLInvalid):
		return "invalid"
	}
	return err.Error()
}

// keysState is what a token and a link signed before a rotation, and one of
// each signed after it, get.
type keysState struct {
	OldToken, NewToken string
	OldLink, NewLink   string
}

// TestKeysRotate: "admin keys rotate token url" with the server
// running (through its admin socket; the keys in force at once, no
// restart) and stopped (the data dir opened by the command): a token and a
// result link signed before are refused, new ones work, and so it stays
// after a restart, which opens the data dir with the new keys. The admin
// audit log has the command; serve's log names the keys rotated, never
// their bytes.
func TestKeysRotate(t *testing.T) {
	for _, running := range []bool{true, false} {
		t.Run(map[bool]string{true: "server running", false: "server stopped"}[running], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			runIn(t, dir, "admin", "tenant", "create", "acme")
			var cred struct {
				ClientID     string `json:"client_id"`
				ClientSecret string `json:"client_secret"`
			}
			out := runIn(t, dir, "admin", "credential", "create", "--tenant", "acme", "--name", "crm", "--scopes", "decisiones:pedir", "--json")
			if err := json.Unmarshal(out, &cred); err != nil || cred.ClientSecret == "" {
				t.Fatalf("credential create: %v\n%s", err, out)
			}
			keysBefore, _ := os.ReadFile(filepath.Join(dir, "keys.json"))
			api := openKeysAPI(t, dir, running)
			oldToken, oldLink := api.token(t, cred.ClientID, cred.ClientSecret), api.link(cred.ClientID)
			before := keysState{OldToken: api.call(t, oldToken), OldLink: api.verify(t, oldLink)}
			if diff := cmp.Diff(keysState{OldToken: "404 no_encontrado", OldLink: "ok"}, before); diff != "" {
				t.Fatalf("before the rotation (-want +got):\n%s", diff)
			}
			// A Go client holding a token signed with the old key asks for a
			// new one on the 401 by itself.
			gc, err := client.New(api.http.URL, cred.ClientID, cred.ClientSecret)
			if err != nil {
				t.Fatal(err)
			}
			defer gc.Close(context.Background())
			goCall := func() string {
				_, err := gc.Batch(context.Background(), "lote_none")
				var apiErr *client.Error
				if !errors.As(err, &apiErr) {
					return fmt.Sprint(err)
				}
				return fmt.Sprint(apiErr.Status, " ", apiErr.Codigo)
			}
			if got := goCall(); got != "404 no_encontrado" {
				t.Fatalf("Go client before the rotation: %s", got)
			}
			if !running {
				api.close()
			}
			r := runLine(t, "admin", "keys", "rotate", "token", "url", "--data-dir", dir)
			if r.Exit != 0 || !strings.Contains(r.Out, "rotated: token, url key(s), in force now") {
				t.Fatalf("admin keys rotate: %+v", r)
			}
			if !running {
				api = openKeysAPI(t, dir, false)
			}
			want := keysState{OldToken: "401 no_autenticado", NewToken: "404 no_encontrado", OldLink: "invalid", NewLink: "ok"}
			check := func(when string, api *keysAPI) {
				got := keysState{OldToken: api.call(t, oldToken), NewToken: api.call(t, api.token(t, cred.ClientID, cred.ClientSecret)),
					OldLink: api.verify(t, oldLink), NewLink: api.verify(t, api.link(cred.ClientID))}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", when, diff)
				}
			}
			check("after the rotation", api)
			if got := goCall(); running && got != "404 no_encontrado" {
				t.Errorf("Go client after the rotation: %s, want it to take a new token by itself (404 no_encontrado)", got)
			}
			logged := api.log.String()
			api.close()
			check("after a restart", openKeysAPI(t, dir, false))
			keysAfter, _ := os.ReadFile(filepath.Join(dir, "keys.json"))
			if running && (!strings.Contains(logged, `"keys":["token","url"]`) || strings.Contains(logged, string(keysAfter[10:30]))) {
				t.Errorf("serve's log: %s\nwant the rotation, naming the keys and not their bytes", logged)
			}
			if audit, _ := os.ReadFile(filepath.Join(dir, auditFile)); !strings.Contains(string(audit), `"keys","rotate","token","url"`) {
				t.Errorf("admin audit log: %s\nwant the rotation's line", audit)
			}
			if string(keysBefore) == string(keysAfter) {
				t.Error("keys.json unchanged")
			}
		})
	}
}

// TestKeysRotateRefuses: the decision and hash keys are never rotated, and
// the refusal says why; a rotation naming no key is refused. keys.json is
// left as it was.
func TestKeysRotateRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	keys, _ := os.ReadFile(filepath.Join(dir, "keys.json"))
	tests := []struct {
		flags []string
		why   string
	}{
		{[]string{"decision"}, "decision_id of every decision awaiting its confirmation"},
		{[]string{"token", "hash"}, "customer hashes that deletion records and backup ledgers are matched by"},
		{[]string{"tokens"}, `no key "tokens": name token (access tokens), url (result links), or both`},
		{nil, "got 0 (usage: coupond admin keys rotate token|url..."},
	}
	for _, tc := range tests {
		r := runLine(t, append([]string{"admin", "keys", "rotate", "--data-dir", dir}, tc.flags...)...)
		if r.Exit == 0 || !strings.Contains(r.Err, tc.why) {
			t.Errorf("admin keys rotate %v: %+v, want refused saying %q", tc.flags, r, tc.why)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "keys.json")); string(after) != string(keys) {
		t.Error("a refused rotation changed keys.json")
	}
}

// TestKeysRotateBackups: a backup taken after a rotation holds the new
// keys (its store's fingerprint theirs: it opens once restored); restoring
// one taken before brings back the keys it was taken with, and its store
// opens with them, instead of being refused as another installation's;
// restoring the later one brings the new keys back again, and a crash
// between the restore's swap and its keys.json leaves a data dir that
// opens. Each backup of
// the installation stays listed, whatever keys it holds.
func TestKeysRotateBackups(t *testing.T) {
	dir, data, before := backedUpTenant(t)
	keysOf := func(d string) string {
		b, err := os.ReadFile(filepath.Join(d, "keys.json"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	runIn(t, data, "admin", "keys", "rotate", "token", "url")
	rotated := keysOf(data)
	after := filepath.Join(dir, "after")
	runIn(t, data, "admin", "backup", "--out", after)
	type state struct {
		Keys    string
		Tenants bool
	}
	tests := []struct {
		from string
		want string
	}{
		{before, keysOf(before)},
		{after, rotated},
	}
	if keysOf(after) != rotated || keysOf(before) == rotated {
		t.Fatal("the backup after the rotation does not hold the new keys")
	}
	for _, tc := range tests {
		out := string(runIn(t, data, "admin", "restore", "--from", tc.from))
		// Keys other than the data dir's are in force (the ones the
		// rotation replaced, then the new ones again): the restore says so
		// and what to run if they leaked, and the store settles on them, so
		// that serve's next start does not report a rotation cut short that
		// never was.
		if again := "coupond admin keys rotate token url"; !strings.Contains(out, again) {
			t.Errorf("restored %s: output does not say %q:\n%s", filepath.Base(tc.from), again, out)
		}
		k := openKeysAPI(t, data, false)
		k.close()
		if log := k.log.String(); strings.Contains(log, "rotation that stopped") {
			t.Errorf("restored %s: serve's start logs a rotation cut short:\n%s", filepath.Base(tc.from), log)
		}
		got := state{keysOf(data), strings.Contains(string(runIn(t, data, "admin", "tenant", "list")), "acme")}
		if diff := cmp.Diff(state{tc.want, true}, got); diff != "" {
			t.Errorf("restored %s (-want +got):\n%s", filepath.Base(tc.from), diff)
		}
	}
	// A crash after the restore swapped the backup's store in and before
	// it put the backup's keys.json in place leaves the rotated keys there,
	// beside a store that accepts them as well as the backup's: the
	// restored store takes them (and then only them).
	runIn(t, data, "admin", "restore", "--from", before)
	crashBetweenSwapAndKeys(t, data, rotated)
	if out := runIn(t, data, "admin", "tenant", "list"); !strings.Contains(string(out), "acme") {
		t.Errorf("restored store beside the rotated keys: %s", out)
	}
	var listed struct{ Backups []struct{ Dir string } }
	if err := json.Unmarshal(runIn(t, data, "admin", "backups", "--json"), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed.Backups) != 2 {
		t.Errorf("admin backups: %+v, want both backups", listed)
	}
}

// crashBetweenSwapAndKeys leaves data, a data dir a restore has just
// brought a backup taken before a rotation back into, as a crash after
// the restore swapped the store in and before it wrote keys.json would:
// the store accepting the rotated keys too (store.DB.AcceptSecrets, as
// the restore's staging store does), keys.json still rotated.
func crashBetweenSwapAndKeys(t *testing.T, data, rotated string) {
	t.Helper()
	keys, err := store.ParseSecrets([]byte(rotated), "keys.json")
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(data, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.AcceptSecrets(keys)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "keys.json"), []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
}
