//go:build linux

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// TestServeRefusesOpenDataDir: serve does not start on a data dir that
// group or others can write.
func TestServeRefusesOpenDataDir(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o770, 0o702} {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, mode)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := Run(ctx, []string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0"}, nil, io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "writable by group or others") || !strings.Contains(err.Error(), "chmod 700") {
			t.Errorf("mode %04o: serve returned %v, want a refusal that says why and how to fix it", mode, err)
		}
		if _, err := os.Stat(filepath.Join(dir, store.SecretsFile)); err == nil {
			t.Errorf("mode %04o: serve wrote keys into the refused dir", mode)
		}
	}
}

// TestServeWarnsOfSwappableDataDir: serve warns of a data dir whose parent
// another user could change (here writable by others or by group, without
// the sticky bit): that user could rename the data dir away and put one of
// theirs, whose files link anywhere, in its place. Under a sticky parent
// (/tmp's mode) or one only this user writes, it says nothing. Either way
// the data dir is used: a group-writable parent is also that of a
// user-private group (umask 002), which the test cannot tell apart.
func TestServeWarnsOfSwappableDataDir(t *testing.T) {
	for _, tc := range []struct {
		parentMode os.FileMode
		warned     bool
	}{
		{0o777, true},
		{0o770, true},
		{0o777 | os.ModeSticky, false},
		{0o755, false},
	} {
		parent := filepath.Join(t.TempDir(), "shared")
		dir := filepath.Join(parent, "data")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, tc.parentMode); err != nil {
			t.Fatal(err)
		}
		if err := Run(context.Background(), []string{"admin", "tenant", "create", "acme", "--data-dir", dir}, nil, io.Discard, io.Discard); err != nil {
			t.Errorf("parent mode %v: %v, want the data dir used", tc.parentMode, err)
		}
		var buf bytes.Buffer
		logSwappableDataDir(zerolog.New(&buf), dir)
		warned := strings.Contains(buf.String(), `"directory":"`+parent+`"`) && strings.Contains(buf.String(), "writable by group or others")
		if warned != tc.warned {
			t.Errorf("parent mode %v: log %q; want warned = %v", tc.parentMode, buf.String(), tc.warned)
		}
	}
}

// TestDataDirOwnerOnly: a pre-existing 0755 data dir, under a permissive
// umask and holding a file an older release left 0644, ends up with every
// directory 0700 and every file 0600 once coupond has used it.
func TestDataDirOwnerOnly(t *testing.T) {
	// The test's own directories first: under umask 0 they would be 0777,
	// where coupond refuses a backup (store.SwappableBy; a data dir there
	// is only warned of).
	dir, backup := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "backup")
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old-release.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"admin", "tenant", "create", "acme", "--data-dir", dir, "--json"}, nil, &out, io.Discard); err != nil {
		t.Fatalf("tenant create: %v", err)
	}
	os.Mkdir(backup, 0o755)
	if err := Run(context.Background(), []string{"admin", "backup", "--out", backup, "--data-dir", dir, "--json"}, nil, &out, io.Discard); err != nil {
		t.Fatalf("backup: %v", err)
	}
	n := 0
	for _, root := range []string{dir, backup} {
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			info, _ := d.Info()
			want := store.FileMode
			if d.IsDir() {
				want = store.DirMode
			}
			if got := info.Mode().Perm(); got != want {
				t.Errorf("%s: mode %04o, want %04o", path, got, want)
			}
			n++
			return nil
		})
	}
	if n < 10 {
		t.Fatalf("only %d entries walked", n)
	}
}

func TestAllowPeer(t *testing.T) {
	for _, tc := range []struct {
		p  peer
		ok bool
	}{
		{peer{UID: 1000, PID: 7, Known: true}, true},
		{peer{UID: 1001, PID: 7, Known: true}, false},
		{peer{UID: 0, PID: 7, Known: true}, false}, // not even root, if serve runs as another user
		{peer{UID: -1, PID: -1}, true},             // platform without peer credentials: the 0600 mode guards
	} {
		if err := allowPeer(tc.p, 1000); (err == nil) != tc.ok {
			t.Errorf("allowPeer(%+v, 1000) = %v, want ok=%v", tc.p, err, tc.ok)
		}
	}
}

func TestRedactArgs(t *testing.T) {
	in := []string{"admin", "x", "--client-secret", "s3", "--token=abc", "--tenant", "acme", "--api-key=k", "--name", "n", "--customer", "ana-00000001", "--customer=ana-00000001", "--password"}
	want := []string{"admin", "x", "--client-secret", "***", "--token=***", "--tenant", "acme", "--api-key=***", "--name", "n", "--customer", "***", "--customer=***", "--password"}
	if diff := cmp.Diff(want, redactArgs(in)); diff != "" {
		t.Errorf("redactArgs (-want +got):\n%s", diff)
	}
}

// TestAdminSocketPeerAndAudit runs admin commands through a live admin
// socket: they are audited with the peer's uid and pid; a connection from a
// uid other than serve's is refused (the socket's owner is set to another
// uid than ours, since a test cannot switch its own) and audited too.
func TestAdminSocketPeerAndAudit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	e, err := openEnv(context.Background(), dir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	sock := filepath.Join(dir, adminSocket)
	srv, err := serveAdmin(context.Background(), sock, e)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if info, err := os.Stat(sock); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("admin.sock: %v %v, want mode 0600", info.Mode(), err)
	}
	var out bytes.Buffer
	args := []string{"admin", "tenant", "create", "acme", "--json"}
	if err := forwardAdmin(context.Background(), sock, adminWait{adminDial, defaultAdminTotal}, args, &out, io.Discard); err != nil {
		t.Fatalf("through the socket: %v", err)
	}
	if err := forwardAdmin(context.Background(), sock, adminWait{adminDial, defaultAdminTotal}, []string{"admin", "tenant", "show", "nadie"}, io.Discard, io.Discard); err == nil {
		t.Fatal("tenant show of an unknown tenant succeeded")
	}
	entries, _, err := readAudit(filepath.Join(dir, auditFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d audit entries, want 2: %+v", len(entries), entries)
	}
	if e0 := entries[0]; e0.UID != os.Getuid() || e0.PID != os.Getpid() || e0.Exit != 0 || !cmp.Equal(e0.Args, args) {
		t.Errorf("audit entry %+v: want uid %d pid %d exit 0 args %v", e0, os.Getuid(), os.Getpid(), args)
	}
	if e1 := entries[1]; e1.Exit == 0 || e1.Error == "" {
		t.Errorf("failed command audited as %+v, want its exit and error", e1)
	}

	// A server run by another uid refuses us.
	sock2 := filepath.Join(t.TempDir(), "other.sock")
	ln, err := net.Listen("unix", sock2)
	if err != nil {
		t.Fatal(err)
	}
	audit := &auditLog{path: filepath.Join(dir, auditFile)}
	pl := &peerListener{Listener: ln, self: os.Getuid() + 1, log: zerolog.Nop(), audit: audit}
	other := &http.Server{ConnContext: peerContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a refused peer reached the handler")
	})}
	go other.Serve(pl)
	defer other.Close()
	if err := forwardAdmin(context.Background(), sock2, adminWait{adminDial, defaultAdminTotal}, args, io.Discard, io.Discard); err == nil {
		t.Fatal("a peer with another uid was served")
	}
	entries, _, _ = readAudit(filepath.Join(dir, auditFile))
	if last := entries[len(entries)-1]; last.Exit != -1 || last.UID != os.Getuid() || !strings.Contains(last.Error, "not the uid") {
		t.Errorf("refusal audited as %+v", last)
	}

	// admin audit --json shows the log.
	out.Reset()
	if err := Run(context.Background(), []string{"admin", "audit", "--json", "--data-dir", dir}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var shown []auditEntry
	if err := json.Unmarshal(out.Bytes(), &shown); err != nil || len(shown) != 3 {
		t.Fatalf("admin audit --json: %v %d entries\n%s", err, len(shown), out.String())
	}
	if info, err := os.Stat(filepath.Join(dir, auditFile)); err != nil || info.Mode().Perm() != store.FileMode {
		t.Errorf("audit log mode %v %v, want 0600", info.Mode(), err)
	}
}

// TestServeHTTPFlags: --read-timeout and --max-conns (and their
// environment variables) must be positive, and --addr and --console-addr
// must be host:port; each refusal names its one flag, before the store is
// opened (a bad --addr failed only at listen, as "listen bogus: …", and
// "127.0.0.1:-1" was blamed on --base-url).
func TestServeHTTPFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--read-timeout", "0s"}, want: "--read-timeout must be positive"},
		{args: []string{"--max-conns", "-1"}, want: "--max-conns must be positive"},
		{args: []string{"--addr", "bogus"}, want: `--addr: want host:port such as 127.0.0.1:8080, got "bogus"`},
		{args: []string{"--addr", "127.0.0.1:-1"}, want: `--addr: want host:port`},
		{args: []string{"--addr", "127.0.0.1:65536"}, want: `--addr: want host:port`},
		{args: []string{"--console-addr", "8081"}, want: `--console-addr: want host:port such as 127.0.0.1:8080, got "8081"`},
		{args: []string{"--base-url", "coupons.example.com"}, want: `--base-url: want http(s)://host[:port][/prefix] such as https://coupons.example.com, got "coupons.example.com"`},
		{args: []string{"--base-url", "https://u:secret@coupons.example.com"}, want: `--base-url: want http(s)://host[:port][/prefix] without a user or password, got "https://u:xxxxx@coupons.example.com"`},
		{env: "COUPOND_READ_TIMEOUT", want: "--read-timeout must be positive"}, // last: it stays set
	} {
		dir := filepath.Join(t.TempDir(), "data")
		if tc.env != "" {
			t.Setenv(tc.env, "0s")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a serve that starts stops
		err := Run(ctx, append([]string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--console-addr", ""}, tc.args...), nil, io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %s: %v, want a refusal containing %q", tc.args, tc.env, err, tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v %s: the data dir was created (%v)", tc.args, tc.env, err)
		}
	}
}

// TestServeTrustedProxiesFlag: --trusted-proxies takes addresses and CIDR
// ranges; anything else is refused, naming the flag.
func TestServeTrustedProxiesFlag(t *testing.T) {
	got, err := parsePrefixes(" 127.0.0.1, 10.0.0.0/8,::1,, 2001:db8::/32")
	want := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("2001:db8::/32")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("parsePrefixes = %v, %v; want %v", got, err, want)
	}
	if got, err := parsePrefixes(""); err != nil || len(got) != 0 {
		t.Errorf("empty list: %v, %v; want none", got, err)
	}
	dir := t.TempDir()
	err = Run(context.Background(), []string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--trusted-proxies", "127.0.0.1,proxy.local"}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--trusted-proxies") || !strings.Contains(err.Error(), "proxy.local") {
		t.Errorf("--trusted-proxies with a host name: %v, want a refusal naming the flag and the item", err)
	}
}

// TestServeFeaturesCacheFlag: --features-cache-mib outside 0-4096 is
// refused, naming the flag.
func TestServeFeaturesCacheFlag(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"-1", "5000"} {
		err := Run(context.Background(), []string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--features-cache-mib", v}, nil, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--features-cache-mib") {
			t.Errorf("--features-cache-mib %s: %v, want a refusal naming the flag", v, err)
		}
	}
}

// TestAdminRefusesMissingDataDir: an admin command pointed at a data dir
// that does not exist (a mistyped --data-dir) fails, naming the dir and the
// flag, and creates nothing; "admin tenant create" is the one that may
// create it, as serve does.
func TestAdminRefusesMissingDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo")
	for _, args := range [][]string{
		{"admin", "tenant", "list"},
		{"admin", "evaluate", "--tenant", "acme"},
		{"admin", "check"},
	} {
		_, _, err := runCLI(t, append(args, "--data-dir", dir)...)
		if err == nil || !strings.Contains(err.Error(), dir+" does not exist") || !strings.Contains(err.Error(), "--data-dir") {
			t.Errorf("%v: %v; want an error naming the missing dir and --data-dir", args, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%v created the data dir (stat: %v)", args, err)
		}
	}
	if _, _, err := runCLI(t, "admin", "tenant", "create", "acme", "--data-dir", dir); err != nil {
		t.Fatalf("tenant create on a new data dir: %v", err)
	}
	out, _, err := runCLI(t, "admin", "tenant", "list", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "acme") {
		t.Errorf("tenant list after create: %q, %v", out, err)
	}
}

// TestAdminRefusesDirWithoutCoupondData: an admin command pointed at a
// directory that exists but holds no coupond data (empty, or holding only
// the operator's own files) fails naming it and changes nothing. It made
// the directory 0700 and its files 0600, wrote a new store and keys into
// it and answered as if it were the server's data dir ("0 tenants"; admin
// check exit 0). "admin tenant create" may still start a data dir there.
func TestAdminRefusesDirWithoutCoupondData(t *testing.T) {
	empty := t.TempDir()
	withFile := t.TempDir()
	if err := os.WriteFile(filepath.Join(withFile, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{empty, withFile} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		before := modes(t, dir)
		for _, args := range [][]string{
			{"admin", "tenant", "list"},
			{"admin", "check"},
			{"admin", "evaluate", "--tenant", "acme"},
			{"admin", "audit"},
			{"admin", "console", "login"},
		} {
			out, _, err := runCLI(t, append(args, "--data-dir", dir)...)
			if err == nil || !strings.Contains(err.Error(), dir+" holds no coupond data") || !strings.Contains(err.Error(), "--data-dir") || out != "" {
				t.Errorf("%v on %s: %v, stdout %q; want an error naming the dir and --data-dir", args, dir, err, out)
			}
			if diff := cmp.Diff(before, modes(t, dir)); diff != "" {
				t.Errorf("%v changed %s (-before +after):\n%s", args, dir, diff)
			}
		}
	}
	if _, _, err := runCLI(t, "admin", "tenant", "create", "acme", "--data-dir", empty); err != nil {
		t.Fatalf("tenant create in an empty dir: %v", err)
	}
	if out, _, err := runCLI(t, "admin", "tenant", "list", "--data-dir", empty); err != nil || !strings.Contains(out, "acme") {
		t.Errorf("tenant list after create: %q, %v", out, err)
	}
}

// TestServeRefusesDataDirTooLongForSocket: a data dir whose admin socket
// path a unix socket cannot hold is refused before anything is created,
// naming the flag, instead of "bind: invalid argument" after the store
// was opened.
func TestServeRefusesDataDirTooLongForSocket(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", maxSocketPath))
	err := Run(context.Background(), []string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--console-addr", ""}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "shorter") {
		t.Errorf("serve with a %d-byte data dir: %v, want a refusal naming --data-dir", len(dir), err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data dir was created (%v)", err)
	}
}

// TestAuditEntryAfterTornLine: an audit entry written after a crash cut
// the previous one short (no newline) is read back. It was appended to
// the torn line, and the two were skipped together as one line that does
// not parse: a synced entry lost.
func TestAuditEntryAfterTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), auditFile)
	if err := os.WriteFile(path, []byte(`{"time":"2026-11-02T12:00:00Z","uid":1,"pid":2,"args":["tenant","cre`), 0o600); err != nil {
		t.Fatal(err)
	}
	want := auditEntry{Time: time.Date(2026, 11, 2, 12, 1, 0, 0, time.UTC), UID: 1, PID: 3, Args: []string{"tenant", "list"}}
	if err := (&auditLog{path: path}).write(want); err != nil {
		t.Fatal(err)
	}
	got, skipped, err := readAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]auditEntry{want}, got); diff != "" {
		t.Errorf("audit log after a torn line (-want +got):\n%s", diff)
	}
	if skipped != 0 {
		t.Errorf("%d lines skipped, want 0: the torn line was cut off", skipped)
	}
}

// TestAdminAuditCountsDamagedLines: admin audit shows the entries it can
// read and says on stderr how many lines it could not; it skipped them in
// silence.
func TestAdminAuditCountsDamagedLines(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	runIn(t, data, "admin", "tenant", "create", "acme")
	good := `{"time":"2026-11-02T12:00:00Z","uid":1,"pid":2,"args":["tenant","list"],"exit":0}` + "\n"
	if err := os.WriteFile(filepath.Join(data, auditFile), []byte(good+"{\"time\":\x00\xff garbage\n"+good), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runCLI(t, "admin", "audit", "--data-dir", data)
	if err != nil || strings.Count(out, "tenant list") != 2 || !strings.Contains(errOut, "1 line that cannot be read") {
		t.Errorf("admin audit: %v\nstdout %q\nstderr %q\nwant both entries and the damaged line counted", err, out, errOut)
	}
}

// TestStoreOpenErrorHint: a store that does not open because it is
// damaged is not blamed on another process; one whose lock another holder
// has is.
func TestStoreOpenErrorHint(t *testing.T) {
	damaged := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(damaged, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged, "db", "CURRENT"), []byte("junk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(t.TempDir(), "data")
	runIn(t, held, "admin", "tenant", "create", "acme")
	db, err := store.Open(filepath.Join(held, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		dir       string
		wantAsked bool
	}{{damaged, false}, {held, true}} {
		_, _, err := runCLI(t, "admin", "tenant", "list", "--data-dir", tc.dir)
		if err == nil || strings.Contains(err.Error(), "is another") != tc.wantAsked {
			t.Errorf("%s: %v; want an error that asks about another process: %v", tc.dir, err, tc.wantAsked)
		}
	}
}

// TestChmodErrorSaysWhoOwnsIt: a file in the data dir that cannot be made
// owner-only because another user owns it (coupond run once as root) is
// refused with what to do; other failures keep their own words.
func TestChmodErrorSaysWhoOwnsIt(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&fs.PathError{Op: "chmod", Path: "d/keys.json", Err: syscall.EPERM},
			"data dir d: d/keys.json has mode 0644 and cannot be made 0600, as every file there must be: it belongs to another user (was coupond run as root?); " +
				"give the data dir back to the user that runs coupond (chown -R USER d) (chmod d/keys.json: operation not permitted)"},
		{&fs.PathError{Op: "chmod", Path: "d/keys.json", Err: syscall.EIO}, "data dir: chmod d/keys.json: input/output error"},
	} {
		if diff := cmp.Diff(tc.want, chmodError("d", "d/keys.json", 0o644, 0o600, tc.err).Error()); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tc.err, diff)
		}
	}
}

// TestRefusesForeignDataDir: a --data-dir that holds no coupond data but
// holds a directory or a symbolic link (a mistyped path such as /, a home
// or /etc) is refused by serve and every admin command before anything in
// it changes: no mode tightened (an executable kept its execute bits, a
// 0755 directory stayed 0755), no store, keys or lock written. A new data
// dir that holds only files its operator put there (the README's
// serve.log) or a file system's lost+found is used.
func TestRefusesForeignDataDir(t *testing.T) {
	tests := []struct {
		name   string
		make   func(t *testing.T, dir string) // fills dir (0755)
		refuse bool
	}{
		{"a tree with an executable", func(t *testing.T, dir string) {
			mustMkdir(t, filepath.Join(dir, "bin"), 0o755)
			mustWrite(t, filepath.Join(dir, "bin", "tool"), 0o755)
		}, true},
		{"a symbolic link", func(t *testing.T, dir string) {
			if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"an empty dir", func(*testing.T, string) {}, false},
		{"the operator's serve.log", func(t *testing.T, dir string) { mustWrite(t, filepath.Join(dir, "serve.log"), 0o644) }, false},
		{"a file system's lost+found", func(t *testing.T, dir string) { mustMkdir(t, filepath.Join(dir, "lost+found"), 0o700) }, false},
	}
	cmds := [][]string{
		{"admin", "tenant", "create", "acme"},
		{"admin", "tenant", "list"},
		{"serve", "--addr", "127.0.0.1:0", "--console-addr", ""},
	}
	for _, tc := range tests {
		for _, args := range cmds[:len(cmds)-1] {
			t.Run(tc.name+"/"+strings.Join(args, " "), func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "data")
				mustMkdir(t, dir, 0o755)
				tc.make(t, dir)
				before := modes(t, dir)
				_, _, err := runCLI(t, append(args, "--data-dir", dir)...)
				creates := args[1] == "tenant" && args[2] == "create"
				switch {
				case creates && !tc.refuse:
					if err != nil {
						t.Fatalf("%v: %v, want the dir used", args, err)
					}
					return
				case creates:
					if err == nil || !strings.Contains(err.Error(), "--data-dir "+dir+" is not a coupond data dir") {
						t.Fatalf("%v: %v, want a refusal naming --data-dir", args, err)
					}
				default: // a command that starts no data dir refuses every one of them
					if err == nil || !strings.Contains(err.Error(), "data dir "+dir+" holds no coupond data") {
						t.Fatalf("%v: %v, want a refusal naming the dir", args, err)
					}
				}
				if diff := cmp.Diff(before, modes(t, dir)); diff != "" {
					t.Errorf("%v changed the refused dir (-before +after):\n%s", args, diff)
				}
			})
		}
	}
	// serve: refused before it opens anything (it would listen otherwise),
	// and so when the disk is below its reserve (a reserve larger than any
	// disk), before it waits for space and takes the lock.
	for _, extra := range [][]string{nil, {"--disk-reserve", "1000000TiB"}} {
		dir := filepath.Join(t.TempDir(), "data")
		mustMkdir(t, dir, 0o755)
		tests[0].make(t, dir)
		before := modes(t, dir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := Run(ctx, append(append(cmds[2], "--data-dir", dir), extra...), nil, io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "is not a coupond data dir") {
			t.Errorf("serve %v: %v, want a refusal", extra, err)
		}
		if diff := cmp.Diff(before, modes(t, dir)); diff != "" {
			t.Errorf("serve %v changed the refused dir (-before +after):\n%s", extra, diff)
		}
	}
}

// modes maps every path under dir to its mode (type and permissions).
func modes(t *testing.T, dir string) map[string]string {
	t.Helper()
	return pathsTo(t, dir, func(i fs.FileInfo) string { return i.Mode().String() })
}

// pathsTo maps every path under dir (dir included) to what of reads in its
// file info.
func pathsTo[T any](t *testing.T, dir string, of func(fs.FileInfo) T) map[string]T {
	t.Helper()
	m := map[string]T{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m[path] = of(info)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustMkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestServeLogsSwappableDataDir: serve itself logs the warning of
// logSwappableDataDir at its start, for a data dir whose parent others
// can write, and serves.
func TestServeLogsSwappableDataDir(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "shared")
	dir := filepath.Join(parent, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o777); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var logs bytes.Buffer
	served := make(chan error, 1)
	go func() {
		served <- Run(ctx, []string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--console-addr", "", "--disk-reserve", "0"}, nil, io.Discard, &logs)
	}()
	waitFor(t, 20*time.Second, "the admin socket", func() bool {
		c, err := net.Dial("unix", filepath.Join(dir, adminSocket))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(logs.String(), `"directory":"`+parent+`"`) {
		t.Errorf("serve's log holds no warning of the data dir's parent %s:\n%s", parent, logs.String())
	}
}

// TestOpenEnvInUseChangesNothing: an admin command that finds the data dir
// locked (a restore running in it, or another command) is refused as in use
// and leaves the tree as it was. It made the tree owner-only before it
// tried the lock, so it walked a running restore's staging store, whose
// files come and go: now and then it failed on a vanished file ("lstat …")
// instead of being refused (TestRestoreLeftoversRemovedAtOpen under load).
func TestOpenEnvInUseChangesNothing(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	runIn(t, data, "admin", "tenant", "create", "acme")
	staged := filepath.Join(data, "db.restoring", "acme", "000001.sst")
	if err := os.MkdirAll(filepath.Dir(staged), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(staged, []byte("staging"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(staged, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	lock, err := privacy.LockDataDir(data)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	e, err := openEnv(context.Background(), data, zerolog.Nop(), serviceOptions{})
	if err == nil {
		e.close()
		t.Fatal("openEnv succeeded while another holder had the data dir's lock")
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Errorf("openEnv: %v; want the data dir refused as in use", err)
	}
	if info, err := os.Stat(staged); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("the locked data dir's tree was changed by a refused command: %v %v, want mode 0644 as it was", info.Mode().Perm(), err)
	}
}
