package atomicfile

import (
	"io"
	"io/fs"
	"os"
)

// FS is the few file system calls coupond makes for the files it writes
// outside the store (result files, the admin audit log): OS is the real
// one; a test wraps it (atomicfile/faultfs) to make a write fail as on a
// full disk. Paths are the host's, as os takes them.
type FS interface {
	// OpenFile opens name as os.OpenFile does (a directory too, read-only,
	// to fsync it).
	OpenFile(name string, flag int, perm fs.FileMode) (Handle, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	MkdirAll(path string, perm fs.FileMode) error
}

// Handle is an open file of an FS (an *os.File on OS).
type Handle interface {
	io.Writer
	io.ReaderAt
	Sync() error
	Close() error
	Stat() (fs.FileInfo, error)
	Truncate(size int64) error
	// Name is the path the file was opened with.
	Name() string
}

// OS is the operating system's file system, through package os.
type OS struct{}

// OpenFile is os.OpenFile.
func (OS) OpenFile(name string, flag int, perm fs.FileMode) (Handle, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // not a typed nil in a non-nil Handle
	}
	return f, nil
}

// Rename is os.Rename.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove is os.Remove.
func (OS) Remove(name string) error { return os.Remove(name) }

// MkdirAll is os.MkdirAll.
func (OS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }
