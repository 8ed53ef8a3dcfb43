package store

import (
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ownerOnlyFS is the real filesystem with every file and directory Pebble
// creates made owner-only (0600 / 0700) whatever the process's umask and the
// modes of the directories around it: the store holds every tenant's data
// and must not be readable by other users of the machine. Checkpoints
// (backups) go through it too.
type ownerOnlyFS struct{ vfs.FS }

// Owner-only modes of the data dir's files and directories.
const (
	FileMode os.FileMode = 0o600
	DirMode  os.FileMode = 0o700
)

func (fs ownerOnlyFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return ownerOnly(f, name, err)
}

func (fs ownerOnlyFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return ownerOnly(f, name, err)
}

func (fs ownerOnlyFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return ownerOnly(f, newname, err)
}

func (fs ownerOnlyFS) MkdirAll(dir string, _ os.FileMode) error {
	if err := fs.FS.MkdirAll(dir, DirMode); err != nil {
		return err
	}
	return os.Chmod(dir, DirMode)
}

func (fs ownerOnlyFS) Lock(name string) (io.Closer, error) {
	c, err := fs.FS.Lock(name)
	return ownerOnly(c, name, err)
}

func (fs ownerOnlyFS) Unwrap() vfs.FS { return fs.FS }

// ownerOnly sets name's mode to FileMode once f (a file or a lock) is open;
// it closes f when it cannot.
func ownerOnly[F io.Closer](f F, name string, err error) (F, error) {
	var none F
	if err != nil {
		return none, err
	}
	if err := os.Chmod(name, FileMode); err != nil {
		f.Close()
		return none, err
	}
	return f, nil
}

// LockFile takes an exclusive lock on the file at path (created, owner-only,
// when missing) with Pebble's file lock: it is held until the returned
// Closer is closed, and refused, with an error, while another process or
// another holder in this one holds it.
func LockFile(path string) (io.Closer, error) { return ownerOnlyFS{vfs.Default}.Lock(path) }
