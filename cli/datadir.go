package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
	if err := os.MkdirAll(dir, store.DirMode); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	if info.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("data dir %s is writable by group or others (mode %04o): refusing to use it; "+
			"check that nobody else placed files in it, then run: chmod 700 %s", dir, info.Mode().Perm(), dir)
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("data dir: %w", err)
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
			return fmt.Errorf("data dir: %w", err)
		}
		if info.Mode().Perm() != want {
			if err := os.Chmod(path, want); err != nil {
				return chmodError(dir, path, info.Mode().Perm(), want, err)
			}
		}
		return nil
	})
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
