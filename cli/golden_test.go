package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coupond/coupond/internal/golden"
)

// runIn runs coupond in process against dataDir and returns its stdout; it
// fails the test on an error.
func runIn(t *testing.T, dataDir string, args ...string) []byte {
	t.Helper()
	return runInAt(t, time.Now, dataDir, args...)
}

// runInAt is runIn with now the clock of the services it opens on dataDir.
func runInAt(t *testing.T, now func() time.Time, dataDir string, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	full := append(append([]string(nil), args...), "--data-dir", dataDir)
	if err := run(context.Background(), now, full, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("coupond %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes()
}

// cliVolatile are the members of admin outputs that change from run to run.
var cliVolatile = []string{"created_at", "client_id", "client_secret", "clock_now", "now", "real_now", "generated_at",
	"generado_en", "taken_at", "completed_at", "expires_at", "last_used_at", "data_dir", "elapsed", "elapsed_ms", "duration_ms",
	"requested_at", "erased_at", "deleted_at", "by", "rotated_at"}

// TestGoldenAdminOutputs runs the admin commands an operator starts with,
// in process, on a fresh data dir, and compares their --json output with
// testdata/admin/.
func TestGoldenAdminOutputs(t *testing.T) {
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme", "--sandbox", "--json")
	runIn(t, dir, "admin", "credential", "create", "--tenant", "acme", "--name", "pos", "--scopes", "eventos:publicar,decisiones:pedir", "--json")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"tenant_show", []string{"admin", "tenant", "show", "acme", "--json"}},
		{"credential_list", []string{"admin", "credential", "list", "--tenant", "acme", "--json"}},
		{"evaluate_empty", []string{"admin", "evaluate", "--tenant", "acme", "--json"}},
		{"check", []string{"admin", "check", "--json"}},
		{"keys_rotate", []string{"admin", "keys", "rotate", "token", "url", "--json"}},
		// Last: the tenant is gone after it.
		{"tenant_delete", []string{"admin", "tenant", "delete", "acme", "--confirm", "acme", "--json"}},
		{"tenant_deletions", []string{"admin", "tenant", "deletions", "--json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden.JSON(t, "admin/"+tc.name+".json", runIn(t, dir, tc.args...), cliVolatile...)
		})
	}
}
