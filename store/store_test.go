package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
)

func openMem(t *testing.T) (*DB, vfs.FS) {
	t.Helper()
	fs := vfs.NewMem()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, fs
}

func TestKeyOrderMatchesComponentOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		lo, hi []byte
	}{
		{"time", key("acme", tableCustomerEvent, "c1", t0), key("acme", tableCustomerEvent, "c1", t0.Add(time.Nanosecond))},
		{"negative before positive", key("acme", tableRewardQueue, int64(-5)), key("acme", tableRewardQueue, int64(3))},
		{"string prefix", key("acme", tableEvent, "ab"), key("acme", tableEvent, "abc")},
		{"tenant prefix isolation", key("acme", tableEvent, "zzz"), key("acme2", tableEvent, "a")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if bytes.Compare(tt.lo, tt.hi) >= 0 {
				t.Errorf("Key order: got %x >= %x, want <", tt.lo, tt.hi)
			}
		})
	}
	// A tenant's span never covers another tenant whose id it prefixes.
	lo := tenantPrefix("acme")
	hi := prefixEnd(lo)
	other := key("acme2", tableEvent, "x")
	if bytes.Compare(other, lo) >= 0 && bytes.Compare(other, hi) < 0 {
		t.Errorf("tenant span of acme contains a key of acme2")
	}
}

func TestSplitKeyRoundTrip(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 10, time.UTC)
	k := key("acme", tableCustomerDecide, "cliente-1", at, "nonce")
	parts, ok := splitKey("acme", k, "s8s")
	if !ok {
		t.Fatal("SplitKey: not ok")
	}
	got := []string{string(parts[0]), timeAt(parts[1]).Format(time.RFC3339Nano), string(parts[2])}
	want := []string{"cliente-1", at.Format(time.RFC3339Nano), "nonce"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SplitKey (-want +got):\n%s", diff)
	}
	if _, ok := splitKey("acme", k[:len(k)-2], "s8s"); ok {
		t.Error("SplitKey accepted a truncated key")
	}
}

func TestTenantsPersistAndUpdate(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := db.CreateTenant(&Tenant{ID: "acme", CreatedAt: now, Sandbox: true, ClockNow: now, Settings: DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateTenant(&Tenant{ID: "acme"}); !errors.Is(err, ErrExists) {
		t.Errorf("second create: got %v, want ErrExists", err)
	}
	for _, bad := range []string{"", "Acme", "a.b", "-x", "abcdefghijklmnopqrstuvwxyz0123456"} {
		if err := db.CreateTenant(&Tenant{ID: bad}); err == nil {
			t.Errorf("CreateTenant(%q): got nil error", bad)
		}
	}
	if _, err := db.UpdateTenant("acme", func(t *Tenant) error { t.ClockNow = t.ClockNow.Add(36 * time.Hour); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateTenant("acme", func(*Tenant) error { return fmt.Errorf("refused") }); err == nil {
		t.Error("UpdateTenant ignored fn's error")
	}
	db.Close()

	db, err = Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, ok := db.Tenant("acme")
	if !ok {
		t.Fatal("tenant lost on reopen")
	}
	if want := now.Add(36 * time.Hour); !got.Now(time.Now()).Equal(want) {
		t.Errorf("sandbox clock after reopen: got %v, want %v", got.Now(time.Now()), want)
	}
}

func TestCredentialSecretMatching(t *testing.T) {
	db, _ := openMem(t)
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := db.CreateTenant(&Tenant{ID: "acme", CreatedAt: now, Settings: DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateCredential(&Credential{ClientID: "ci_1", Tenant: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("credential of unknown tenant: got %v, want ErrNotFound", err)
	}
	if err := db.CreateCredential(&Credential{ClientID: "ci_1", Tenant: "acme", SecretHash: HashSecret("old")}); err != nil {
		t.Fatal(err)
	}
	c, err := db.UpdateCredential("ci_1", func(c *Credential) error {
		c.Rotate(HashSecret("new"), now, time.Hour)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		secret  string
		at      time.Time
		wantGen uint32
		want    bool
	}{
		{"new", now, 1, true},
		{"old", now, 0, true},
		{"old", now.Add(time.Hour), 0, false},
		{"wrong", now, 0, false},
		{"", now, 0, false},
	}
	for _, tt := range tests {
		gen, ok := c.SecretMatches(tt.secret, tt.at)
		if ok != tt.want || ok && gen != tt.wantGen {
			t.Errorf("SecretMatches(%q, %v) = %d, %v, want %d, %v", tt.secret, tt.at, gen, ok, tt.wantGen, tt.want)
		}
	}
}

// TestCredentialAcceptsGeneration: a token's secret generation is
// accepted while its secret is, including for a credential rotated before
// generations were stored (SecretGen 0 with a previous secret).
func TestCredentialAcceptsGeneration(t *testing.T) {
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	fresh := &Credential{SecretHash: HashSecret("a")}
	once := *fresh
	once.Rotate(HashSecret("b"), now, time.Hour)
	twice := once
	twice.Rotate(HashSecret("c"), now, time.Hour)
	legacy := &Credential{SecretHash: HashSecret("b"), PrevSecretHash: HashSecret("a"), PrevUntil: now.Add(time.Hour), RotatedAt: now}
	tests := []struct {
		name string
		c    *Credential
		gen  uint32
		at   time.Time
		want bool
	}{
		{"never rotated, current", fresh, 0, now, true},
		{"never rotated, other", fresh, ^uint32(0), now, false},
		{"rotated, new secret", &once, 1, now.Add(48 * time.Hour), true},
		{"rotated, old secret in grace", &once, 0, now.Add(time.Hour - time.Second), true},
		{"rotated, old secret after grace", &once, 0, now.Add(time.Hour), false},
		{"rotated twice, first secret", &twice, 0, now, false},
		{"rotated twice, second secret in grace", &twice, 1, now, true},
		{"rotated before generations, current", legacy, 0, now, true},
		{"rotated before generations, old in grace", legacy, ^uint32(0), now, true},
		{"rotated before generations, old after grace", legacy, ^uint32(0), now.Add(time.Hour), false},
	}
	for _, tt := range tests {
		if got := tt.c.AcceptsGeneration(tt.gen, tt.at); got != tt.want {
			t.Errorf("%s: AcceptsGeneration(%d) = %v, want %v", tt.name, tt.gen, got, tt.want)
		}
	}
	if gen, ok := legacy.SecretMatches("a", now); !ok || !legacy.AcceptsGeneration(gen, now) {
		t.Errorf("legacy credential, old secret in grace: gen %d ok %v, not accepted", gen, ok)
	}
}

func TestBatchScanAndCompact(t *testing.T) {
	db, _ := openMem(t)
	b := db.NewBatch()
	for i := 0; i < 10; i++ {
		b.Set(key("acme", tableEvent, fmt.Sprintf("e%02d", i)), []byte{byte(i)})
		b.Set(key("other", tableEvent, fmt.Sprintf("e%02d", i)), []byte{byte(i)})
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	lo, hi := tableSpan("acme", tableEvent)
	var n int
	if err := db.Scan(lo, hi, func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Errorf("scan of one tenant's table: got %d keys, want 10", n)
	}
	b = db.NewBatch()
	b.DeleteRange(tenantPrefix("acme"), prefixEnd(tenantPrefix("acme")))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Compact(t.Context(), tenantPrefix("acme"), prefixEnd(tenantPrefix("acme"))); err != nil {
		t.Fatal(err)
	}
	n = 0
	db.Scan(lo, hi, func(k, v []byte) error { n++; return nil })
	if n != 0 {
		t.Errorf("after range delete: got %d keys, want 0", n)
	}
	if ok, _ := db.Has(key("other", tableEvent, "e03")); !ok {
		t.Error("range delete of acme removed a key of other")
	}
}

func TestScanJSONAndCount(t *testing.T) {
	db, _ := openMem(t)
	for _, id := range []string{"acme", "beta", "zeta"} {
		if err := db.CreateTenant(&Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	type rec struct {
		N int `json:"n"`
	}
	b := db.NewBatch()
	for i, k := range []string{"b", "a", "c"} {
		if err := b.SetJSON(AccessLogKey("acme", time.Unix(int64(i), 0), k), rec{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetJSON(AccessLogKey("beta", time.Unix(9, 0), "x"), rec{N: 9}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()

	tests := []struct {
		tenant string
		want   []rec
	}{
		{"acme", []rec{{0}, {1}, {2}}}, // key (time) order
		{"beta", []rec{{9}}},
		{"zeta", []rec{}}, // empty, not nil
	}
	for _, tt := range tests {
		lo, hi := AccessLogSpan(tt.tenant)
		got, err := ScanJSON[rec](db, lo, hi)
		if err != nil {
			t.Fatalf("ScanJSON %s: %v", tt.tenant, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ScanJSON %s (-want +got):\n%s", tt.tenant, diff)
		}
		n, err := db.Count(lo, hi)
		if err != nil || n != len(tt.want) {
			t.Errorf("Count %s = %d, %v; want %d", tt.tenant, n, err, len(tt.want))
		}
	}
	if n, err := db.CountEveryTenant(AccessLogSpan); err != nil || n != 4 {
		t.Errorf("CountEveryTenant = %d, %v; want 4", n, err)
	}

	// A value that is not JSON of the type ends the scan with an error.
	b = db.NewBatch()
	b.Set(AccessLogKey("zeta", time.Unix(1, 0), "bad"), []byte("{"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	lo, hi := AccessLogSpan("zeta")
	if _, err := ScanJSON[rec](db, lo, hi); err == nil {
		t.Error("ScanJSON of a damaged value: no error")
	}
}

// TestOpenPastUnreadableTenantAndCredential: a tenant or credential record
// that does not decode no longer makes Open fail (the whole server refused
// to start over one record): it is left out and listed by Unreadable, and
// the other tenants are there.
func TestOpenPastUnreadableTenantAndCredential(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreateTenant(&Tenant{ID: "acme", Settings: DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Set(append(tenantRecordsPrefix(), "broken"...), []byte(`{"id":"broken","settings":`))
	b.Set(append(credentialRecordsPrefix(), "ci_broken"...), []byte(`not json`))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	db.Close()
	db, err = Open("db", fs)
	if err != nil {
		t.Fatalf("open past unreadable records: %v", err)
	}
	defer db.Close()
	if _, ok := db.Tenant("acme"); !ok {
		t.Error("tenant acme lost")
	}
	if got := db.Unreadable(); len(got) != 2 || !strings.Contains(got[0], `"broken"`) || !strings.Contains(got[1], `"ci_broken"`) {
		t.Errorf("Unreadable() = %q, want the tenant and the credential record", got)
	}
}

// TestOpenLoadsTenantAndCredentialCaches: Open reads every tenant and
// credential record into its cache by id; a record that is not JSON of its
// type, or decodes without its id, is left out and listed by Unreadable
// with its table and key, tenants first.
func TestOpenLoadsTenantAndCredentialCaches(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreateTenant(&Tenant{ID: "acme", Settings: DefaultSettings()}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateCredential(&Credential{ClientID: "ci_ok", Tenant: "acme", Name: "n"}); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Set(append(tenantRecordsPrefix(), "noid"...), []byte(`{"sandbox":true}`))
	b.Set(append(tenantRecordsPrefix(), "zz"...), []byte(`[1]`))
	b.Set(append(credentialRecordsPrefix(), "ci_noid"...), []byte(`{"tenant":"acme"}`))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	db.Close()
	db, err = Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var tenants, creds []string
	for _, tn := range db.Tenants() {
		tenants = append(tenants, tn.ID)
	}
	for _, c := range db.Credentials("acme") {
		creds = append(creds, c.ClientID+"/"+c.Name)
	}
	want := []string{
		`tenant record "noid": no id`,
		`tenant record "zz": json: cannot unmarshal array into Go value of type store.Tenant`,
		`credential record "ci_noid": no id`,
	}
	if diff := cmp.Diff(want, db.Unreadable()); diff != "" {
		t.Errorf("Unreadable() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"acme"}, tenants); diff != "" {
		t.Errorf("tenants (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ci_ok/n"}, creds); diff != "" {
		t.Errorf("credentials (-want +got):\n%s", diff)
	}
}

// TestFailedOpenReleasesTheLock: Open takes the directory lock itself
// (before its log check) and passes it to Pebble, whose Close and failed
// Open leave such a lock held; a store Pebble refuses must still release
// it, or the next Open, after the operator put the damaged file right,
// fails as if another process held the store.
func TestFailedOpenReleasesTheLock(t *testing.T) {
	for _, prefix := range []string{"MANIFEST-", "OPTIONS-"} {
		t.Run(prefix, func(t *testing.T) {
			fs := vfs.NewMem()
			db, err := Open("db", fs)
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			name, good := fileWithPrefix(t, fs, prefix)
			damaged := bytes.Clone(good)
			copy(damaged[len(damaged)/2:], []byte{0xff, 0xee, 0x00})
			writeMemFile(t, fs, name, damaged)
			if _, err := Open("db", fs); err == nil {
				t.Fatal("Open of a damaged store succeeded")
			}
			writeMemFile(t, fs, name, good)
			db, err = Open("db", fs)
			if err != nil {
				t.Fatalf("Open after the damaged file was put right: %v", err)
			}
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

// fileWithPrefix returns the path and bytes of db's file named prefix*.
func fileWithPrefix(t *testing.T, fs vfs.FS, prefix string) (string, []byte) {
	t.Helper()
	names, err := fs.List("db")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			f, err := fs.Open(fs.PathJoin("db", n))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			b := make([]byte, st.Size())
			if _, err := f.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			return fs.PathJoin("db", n), b
		}
	}
	t.Fatalf("no %s file", prefix)
	return "", nil
}

func writeMemFile(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
