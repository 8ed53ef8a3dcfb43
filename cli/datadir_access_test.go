//go:build linux

package cli

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// nobody is the uid the tests below hand files to: another user than the
// one running the tests (who must be root to do it).
const nobody = 65534

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root, to hand files to another user")
	}
}

// TestDataDirAccessErrorSaysWhoToRunAs: a user who may not use the data dir
// is told whom to run the command as and how, with the data dir named and
// no system call's words ("open …: permission denied" said neither).
func TestDataDirAccessErrorSaysWhoToRunAs(t *testing.T) {
	const dir = "/var/lib/coupond"
	eacces := &fs.PathError{Op: "open", Path: dir, Err: syscall.EACCES}
	for _, tc := range []struct {
		name string
		err  *dataDirAccessError
		want string
	}{
		{"another user's data dir", &dataDirAccessError{dir: dir, path: dir, owner: "coupond", err: eacces},
			"data dir /var/lib/coupond belongs to coupond, and this user cannot open it: " +
				"run the command as coupond, e.g. sudo -u coupond coupond admin … --data-dir /var/lib/coupond"},
		{"a directory above it shuts this user out", &dataDirAccessError{dir: dir, path: dir, err: eacces},
			"data dir /var/lib/coupond cannot be reached by this user (permission denied): " +
				"run the command as the user that owns the data dir, e.g. sudo -u coupond coupond admin … --data-dir /var/lib/coupond"},
		{"a server run by another user", &dataDirAccessError{dir: dir, path: dir + "/admin.sock", owner: "coupond", server: true},
			"the coupond serving data dir /var/lib/coupond runs as coupond and takes admin commands from that user only: " +
				"run the command as coupond, e.g. sudo -u coupond coupond admin … --data-dir /var/lib/coupond"},
		{"a file in it is another user's", &dataDirAccessError{dir: dir, path: dir + "/keys.json", owner: "root", err: eacces},
			"data dir /var/lib/coupond: /var/lib/coupond/keys.json belongs to root, and this user cannot open it (was coupond run as root?): " +
				"give the data dir back to the user that runs coupond (chown -R USER /var/lib/coupond)"},
	} {
		if diff := cmp.Diff(tc.want, tc.err.Error()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
		if tc.err.err != nil && !errors.Is(tc.err, fs.ErrPermission) {
			t.Errorf("%s: does not unwrap to the permission error", tc.name)
		}
	}
}

// TestDataDirAccessErrorReadsTheOwner: accessError names the owner of what
// could not be opened, and stays out of errors that are not about another
// user's files (the caller's words are better there).
func TestDataDirAccessErrorReadsTheOwner(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(keys, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	denied := func(path string) error { return &fs.PathError{Op: "open", Path: path, Err: syscall.EACCES} }
	for _, err := range []error{nil, &fs.PathError{Op: "open", Path: dir, Err: syscall.EIO}, denied(dir), denied(keys)} {
		if got := accessError(dir, err); got != nil {
			t.Errorf("%v on this user's own data dir: %v, want none", err, got)
		}
	}
	requireRoot(t)
	if err := os.Chown(keys, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	other := userName(nobody)
	want := "data dir " + dir + ": " + keys + " belongs to " + other
	if got := accessError(dir, denied(keys)); got == nil || !strings.HasPrefix(got.Error(), want) {
		t.Errorf("a file of another user's: %v, want %q…", got, want)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	want = "data dir " + dir + " belongs to " + other + ", and this user cannot open it: run the command as " + other
	if got := accessError(dir, denied(dir)); got == nil || !strings.HasPrefix(got.Error(), want) {
		t.Errorf("another user's data dir: %v, want %q…", got, want)
	}
}

// binaryForNobody copies the coupond binary into a directory of its own,
// which the user nobody can reach (the test's temporary directories are
// 0700), removed when the test ends. It skips the test unless it runs as
// root with setpriv.
func binaryForNobody(t *testing.T) (bin, dir string) {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv not found: it runs the command as another user")
	}
	dir, err := os.MkdirTemp("", "coupond-access-bin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin = filepath.Join(dir, "coupond")
	if data, err := os.ReadFile(coupondBinary(t)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

// runAsNobody runs bin with args as the user nobody, in bin's directory,
// and returns its stdout and stderr together.
func runAsNobody(t *testing.T, bin string, args ...string) ([]byte, error) {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups", bin}, args...)...)
	cmd.Dir = filepath.Dir(bin)
	return cmd.CombinedOutput()
}

// TestDataDirOfAnotherUser: an admin command run, as the binary, by a user
// who cannot open the data dir (it belongs to root, mode 0700) says to run
// it as root, naming the dir, instead of "data dir: open …: permission
// denied".
func TestDataDirOfAnotherUser(t *testing.T) {
	bin, binDir := binaryForNobody(t)
	dir := filepath.Join(binDir, "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	out, err := runAsNobody(t, bin, "admin", "tenant", "list", "--data-dir", dir)
	want := "data dir " + dir + " belongs to root, and this user cannot open it: " +
		"run the command as root, e.g. sudo -u root coupond admin … --data-dir " + dir
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("admin tenant list as another user: %v\n%s\nwant %q", err, out, want)
	}
	if strings.Contains(string(out), "open "+dir) {
		t.Errorf("the error still shows the system call:\n%s", out)
	}
}

// TestDataDirServedByAnotherUser: an admin command whose user is not the one
// running the server (root, say, beside a server run as coupond) is told to
// run it as the server's user; the server would have closed the
// connection and the command said "admin socket: …: EOF".
func TestDataDirServedByAnotherUser(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	runIn(t, dir, "admin", "tenant", "create", "acme")
	sock := filepath.Join(dir, adminSocket)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // as serve does with a user it does not serve: close at once
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := os.Chown(sock, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCLI(t, "admin", "tenant", "list", "--data-dir", dir)
	other := userName(nobody)
	want := "the coupond serving data dir " + dir + " runs as " + other + " and takes admin commands from that user only: " +
		"run the command as " + other + ", e.g. sudo -u " + other + " coupond admin … --data-dir " + dir
	if err == nil || err.Error() != want {
		t.Errorf("admin tenant list beside another user's server: %v, want %q", err, want)
	}
}

// TestPprofOfAnotherUsersServer: admin debug pprof run by a user who cannot
// reach the running server's data dir says to run it as the server's user,
// as the other admin commands do; it said "no coupond serves …/admin.sock",
// beside a server that was running.
func TestPprofOfAnotherUsersServer(t *testing.T) {
	bin, binDir := binaryForNobody(t)
	dir := filepath.Join(binDir, "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	serveAdminOn(t, dir)
	out, err := runAsNobody(t, bin, "admin", "debug", "pprof", "--kind", "heap", "--out", filepath.Join(binDir, "heap.pprof"), "--data-dir", dir)
	want := "data dir " + dir + " belongs to root, and this user cannot open it: " +
		"run the command as root, e.g. sudo -u root coupond admin … --data-dir " + dir
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("admin debug pprof as another user: %v\n%s\nwant %q", err, out, want)
	}
}

// TestPrepareDataDirRefusesAnotherUsersDir: root refuses a data dir another
// user owns, even 0700 (root could write there): its owner can chmod it back
// and plant or swap the store, the keys or the admin socket, or plant
// symbolic links that root's writes follow.
func TestPrepareDataDirRefusesAnotherUsersDir(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name  string
		owner int
		want  string // "" for none; else the error's start
	}{
		{"own", os.Getuid(), ""},
		{"another user's", nobody, "data dir DIR belongs to " + userName(nobody) + ", not to this user"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, tc.owner, tc.owner); err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := prepareDataDir(dir); err != nil {
			got = strings.ReplaceAll(err.Error(), dir, "DIR")
		}
		if !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%s: error %q, want %q…", tc.name, got, tc.want)
		}
	}
}
