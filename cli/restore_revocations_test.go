package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/console"
)

// TestRestoreKeepsLaterRevocationsAndRotations: a credential revoked, or
// whose secret was rotated, after a backup was taken stays revoked, or
// keeps only its new secret, when that backup is restored over the store
// that recorded it. A revocation is what an operator does after a secret
// leaked: a restore must not bring the leaked secret back to life.
func TestRestoreKeepsLaterRevocationsAndRotations(t *testing.T) {
	type cred struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	type want struct {
		Active, OldSecret, NewSecret bool
	}
	for _, tc := range []struct {
		name  string
		after []string // the admin command run past the backup, before CLIENT_ID
		want  want
	}{
		{"nothing changed", nil, want{Active: true, OldSecret: true}},
		{"revoked after the backup", []string{"credential", "revoke"}, want{Active: false, OldSecret: true}},
		{"rotated after the backup", []string{"credential", "rotate", "--grace", "0"}, want{Active: true, NewSecret: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
			runIn(t, dataDir, "admin", "tenant", "create", "acme", "--json")
			var c cred
			if err := json.Unmarshal(runIn(t, dataDir, "admin", "credential", "create", "--tenant", "acme", "--name", "crm",
				"--scopes", "eventos:publicar", "--json"), &c); err != nil {
				t.Fatal(err)
			}
			runIn(t, dataDir, "admin", "backup", "--out", bk)
			var rotated cred
			if tc.after != nil {
				args := append(append([]string{"admin"}, tc.after...), c.ClientID, "--json")
				out := runIn(t, dataDir, args...)
				json.Unmarshal(out, &rotated) // only rotate prints a secret
			}
			runIn(t, dataDir, "admin", "restore", "--from", bk)

			e, err := openEnv(context.Background(), dataDir, zerolog.Nop(), serviceOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.close()
			got, ok := e.db.Credential(c.ClientID)
			if !ok {
				t.Fatalf("credential %s missing after the restore", c.ClientID)
			}
			now := time.Now()
			_, oldOK := got.SecretMatches(c.ClientSecret, now)
			newOK := false
			if rotated.ClientSecret != "" {
				_, newOK = got.SecretMatches(rotated.ClientSecret, now)
			}
			if diff := cmp.Diff(tc.want, want{Active: got.Active(), OldSecret: oldOK, NewSecret: newOK}); diff != "" {
				t.Errorf("credential after the restore (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRestoreEndsConsoleSessions: a restore ends every console session and
// sign-in link the backup holds. Without it, a session signed out since the
// backup was taken ("admin console logout --all", after a laptop was lost)
// signed in again by the restore, on the same data dir or a new machine.
func TestRestoreEndsConsoleSessions(t *testing.T) {
	dataDir, bk := t.TempDir(), filepath.Join(t.TempDir(), "bk")
	e, err := openEnv(context.Background(), dataDir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	signIn := func(e *env, link string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"t": {link}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		console.New(console.Deps{DB: e.db, Now: time.Now, Log: zerolog.Nop()}).ServeHTTP(w, r)
		return w
	}
	first, err := console.NewLink(e.db, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cookies := signIn(e, first).Result().Cookies()
	if len(cookies) == 0 {
		t.Fatal("the sign-in before the backup set no cookie")
	}
	unused, err := console.NewLink(e.db, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.close()
	runIn(t, dataDir, "admin", "backup", "--out", bk)
	runIn(t, dataDir, "admin", "console", "logout", "--all")
	runIn(t, dataDir, "admin", "restore", "--from", bk)

	e, err = openEnv(context.Background(), dataDir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/no-such-page", nil) // 404 with a session, 401 without
	for _, c := range cookies {
		r.AddCookie(c)
	}
	console.New(console.Deps{DB: e.db, Now: time.Now, Log: zerolog.Nop()}).ServeHTTP(w, r)
	got := map[string]int{"session signed out before the restore": w.Code, "sign-in link of before the backup": signIn(e, unused).Code}
	want := map[string]int{"session signed out before the restore": http.StatusUnauthorized, "sign-in link of before the backup": http.StatusUnauthorized}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("console after the restore (-want +got):\n%s", diff)
	}
}
