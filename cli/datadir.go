package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// prepareDataDir makes dir owner-only before anything in it is opened
// (contract section 8). It creates dir 0700 when missing; refuses a dir
// that group or others can write (anyone who can write there can plant or
// swap the store, the keys or the admin socket); and tightens what is there
// to 0700 directories and 0600 files, so that a pre-existing 0755 dir, or
// files an older release or another tool left readable, stop being readable
// by other users. Symbolic links are not followed.
func prepareDataDir(dir string) error {
	if err := checkDataDir(dir); err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return dataDirError(dir, err)
		}
		want := store.FileMode
		switch {
		case d.IsDir():
			want = store.DirMode
		case d.Type()&fs.ModeType != 0: // symlinks, sockets: left as they are
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return dataDirError(dir, err)
		}
		if info.Mode().Perm() != want {
			if err := os.Chmod(path, want); err != nil {
				return chmodError(dir, path, info.Mode().Perm(), want, err)
			}
		}
		return nil
	})
}

// checkDataDir is prepareDataDir without the tightening of what dir
// holds: it creates dir 0700 when missing and refuses one that group or
// others can write, or that is no coupond data dir (refuseForeignDir),
// changing nothing there. It reads dir's entries, not its tree: serve runs
// it before it takes the data dir's lock (waitForLock), which creates the
// lock file, and perhaps waits for a restore changing that tree.
func checkDataDir(dir string) error {
	if err := os.MkdirAll(dir, store.DirMode); err != nil {
		return dataDirError(dir, err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return dataDirError(dir, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	if err := refuseSharedDataDir(dir, info); err != nil {
		return err
	}
	return refuseForeignDir(dir)
}

// refuseForeignDir refuses dir, changing nothing, when it holds no coupond
// data (privacy.HoldsCoupondData) but holds something other than regular
// files: a directory (a file system's empty lost+found aside), a symbolic
// link, a socket. That is a mistyped --data-dir such as /, a home or /etc,
// whose whole tree prepareDataDir's tightening would otherwise make
// owner-only (0600 files lose their execute bits) before the store was
// written into it. A new data dir is missing, empty, or holds only the
// files its operator put there first (the README's serve.log).
func refuseForeignDir(dir string) error {
	if privacy.HoldsCoupondData(dir) {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return dataDirError(dir, err)
	}
	for _, d := range entries {
		if d.Type().IsRegular() || (d.Name() == "lost+found" && d.IsDir()) {
			continue
		}
		return fmt.Errorf("--data-dir %s is not a coupond data dir (no db, no keys.json) and holds %s, which a data dir does not: "+
			"refusing to use it, nothing changed; give --data-dir (or COUPOND_DATA_DIR) the server's data dir, or a missing or empty directory",
			dir, filepath.Join(dir, d.Name()))
	}
	return nil
}

// refuseSharedDataDir refuses the data dir dir, whose info is given, when
// group or others can write it, or when root is asked to use a dir another
// user owns (its owner can chmod it back at any time and plant symbolic
// links that root's writes follow): anyone who can write there can plant
// or swap the store, the keys or the admin socket. (Another user than root
// cannot write in a 0700 dir of someone else's: accessError says whom to
// run as.) A data dir in a directory another user could change is only
// warned of, by serve (logSwappableDataDir).
func refuseSharedDataDir(dir string, info fs.FileInfo) error {
	if info.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("data dir %s is writable by group or others (mode %04o): refusing to use it; "+
			"check that nobody else placed files in it, then run: chmod 700 %s", dir, info.Mode().Perm(), dir)
	}
	if uid, ok := store.FileOwner(info); ok && os.Getuid() == 0 && uid != 0 {
		owner := userName(uid)
		return fmt.Errorf("data dir %s belongs to %s, not to this user: refusing to use it (its owner can plant or swap "+
			"the store, the keys or the admin socket); run the command as %s (sudo -u %s coupond … --data-dir %s)",
			dir, owner, owner, owner, dir)
	}
	return nil
}

// logSwappableDataDir warns, in serve's log, of a data dir dir inside a
// directory another user could change (store.SwappableBy): that user could
// rename the data dir away and put one of theirs in its place, whose files
// (backups-owed.jsonl, admin-audit.log, results/) link to any file coupond
// then writes to. A warning, not a refusal: the same test cannot tell a
// group-writable parent of a user-private group (umask 002) or a checkout
// another uid owns, where refusing would stop a sound installation, from a
// shared one.
func logSwappableDataDir(log zerolog.Logger, dir string) {
	d, why, err := store.SwappableBy(dir)
	if err != nil || d == "" {
		return
	}
	log.Warn().Str("data_dir", dir).Str("directory", d).Str("why", why).
		Msg("the data dir lies in a directory another user could change: that user could swap the data dir for one of theirs; move it into a directory only this user (or root) can change")
}

// chmodError is the error of a file in the data dir dir that cannot be
// made owner-only: most often one another user owns (a command run once
// as root), which "data dir: chmod …: operation not permitted" did not say
// nor how to fix.
func chmodError(dir, path string, mode, want fs.FileMode, err error) error {
	if !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("data dir: %w", err)
	}
	return fmt.Errorf("data dir %s: %s has mode %04o and cannot be made %04o, as every file there must be: "+
		"it belongs to another user (was coupond run as root?); give the data dir back to the user that runs coupond (chown -R USER %s) (%w)",
		dir, path, mode, want, dir, err)
}

// orAccessError is accessError's error for err, or err itself.
func orAccessError(dir string, err error) error {
	if aerr := accessError(dir, err); aerr != nil {
		return aerr
	}
	return err
}

// dataDirError is err, met in the data dir dir: accessError's when it is
// one, else err prefixed with "data dir".
func dataDirError(dir string, err error) error {
	if aerr := accessError(dir, err); aerr != nil {
		return aerr
	}
	return fmt.Errorf("data dir: %w", err)
}

// accessError is the error of a command whose user may not use the data
// dir dir: err is a permission error on dir, or on a file in it, and that
// belongs to another user (or dir cannot be reached at all). It is nil for
// any other err, which the caller reports as it would. The error says who
// to run the command as, naming dir, and unwraps to err.
func accessError(dir string, err error) error {
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return nil
	}
	path := dir
	var pe *fs.PathError
	if errors.As(err, &pe) && within(dir, pe.Path) {
		path = pe.Path
	}
	info, serr := os.Stat(path)
	if serr != nil && path != dir {
		path = dir
		info, serr = os.Stat(dir)
	}
	if serr != nil {
		if !errors.Is(serr, fs.ErrPermission) {
			return nil
		}
		return &dataDirAccessError{dir: dir, path: dir, err: err} // a directory above it shuts this user out
	}
	uid, ok := store.FileOwner(info)
	if !ok || uid == os.Getuid() {
		return nil // not a matter of ownership: the caller's error says more
	}
	return &dataDirAccessError{dir: dir, path: path, owner: userName(uid), err: err}
}

// serverOwnerError is the error of an admin command whose user is not the
// one running the server on dir's admin socket sock (the server would
// refuse the connection), or nil.
func serverOwnerError(dir, sock string) error {
	info, err := os.Stat(sock)
	if err != nil {
		return nil
	}
	uid, ok := store.FileOwner(info)
	if !ok || uid == os.Getuid() {
		return nil
	}
	return &dataDirAccessError{dir: dir, path: sock, owner: userName(uid), server: true}
}

// userName is uid as sudo -u takes it: the user's name, or #UID.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return u.Username
	}
	return "#" + strconv.Itoa(uid)
}

// dataDirAccessError says what to run when the user of a command may not
// use the data dir. It names the data dir and the user to run as, never
// the system call that failed.
type dataDirAccessError struct {
	dir    string
	path   string // what this user could not open: dir, a file in it, or the admin socket
	owner  string // path's owner as sudo -u takes it; "" when dir cannot be reached to tell
	server bool   // path is the admin socket of a server run by owner
	err    error
}

func (e *dataDirAccessError) Error() string {
	runAs := func(who, example string) string {
		return fmt.Sprintf("run the command as %s, e.g. sudo -u %s coupond admin … --data-dir %s", who, example, e.dir)
	}
	switch {
	case e.owner == "":
		return fmt.Sprintf("data dir %s cannot be reached by this user (permission denied): %s",
			e.dir, runAs("the user that owns the data dir", "coupond"))
	case e.server:
		return fmt.Sprintf("the coupond serving data dir %s runs as %s and takes admin commands from that user only: %s",
			e.dir, e.owner, runAs(e.owner, e.owner))
	case e.path == e.dir:
		return fmt.Sprintf("data dir %s belongs to %s, and this user cannot open it: %s", e.dir, e.owner, runAs(e.owner, e.owner))
	}
	return fmt.Sprintf("data dir %s: %s belongs to %s, and this user cannot open it (was coupond run as %s?): "+
		"give the data dir back to the user that runs coupond (chown -R USER %s)", e.dir, e.path, e.owner, e.owner, e.dir)
}

func (e *dataDirAccessError) Unwrap() error { return e.err }

// within reports whether path is dir or lies inside it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
