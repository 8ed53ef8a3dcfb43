package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SwappableBy reports a directory on the way to path, path included,
// through which another user could replace path or what it holds: one
// that belongs to a user other than this one and root, or that group or
// others can write without the sticky bit (/tmp's, by which nobody renames
// another user's entry). It returns that directory and why, or "" when
// there is none. Both the path as given (its symbolic links, each in
// its directory) and the path with its links resolved are walked;
// components that do not exist yet are skipped. Whoever can change such a
// directory can rename a data dir or a backup away and put their own in
// its place, whose files link to any file the user that runs coupond can
// write.
func SwappableBy(path string) (dir, why string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", err
	}
	paths := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		paths = append(paths, real)
	}
	uid := os.Getuid()
	for _, p := range paths {
		for d := p; ; d = filepath.Dir(d) {
			info, err := os.Lstat(d)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return "", "", err
			}
			if err == nil {
				if owner, ok := FileOwner(info); ok && owner != uid && owner != 0 {
					return d, fmt.Sprintf("belongs to another user (uid %d)", owner), nil
				}
				if mode := info.Mode(); mode.Type() != fs.ModeSymlink && mode.Perm()&0o022 != 0 && mode&fs.ModeSticky == 0 {
					return d, fmt.Sprintf("is writable by group or others (mode %04o)", mode.Perm()), nil
				}
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return "", "", nil
}
