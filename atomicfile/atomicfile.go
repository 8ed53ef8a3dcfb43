// Package atomicfile is the one way coupond writes a file whole: the bytes
// go to "<path>.tmp" (owner-only), are fsynced, renamed over path and the
// directory is fsynced, so a reader sees the old file or the complete new
// one, never a part, and a crash leaves at most a stale ".tmp" behind. It
// also holds the synced append used by the append-only logs (the deletion
// ledgers of backups, the admin audit log).
//
// Used by: store (keys.json), privacy (backups.json, backup keys and
// manifest), batch (result files, through the streaming Create/Commit
// form), cli (the admin audit log). Each call has a form that takes the
// FS to write on (CreateFS, AppendFS, SyncDirFS); the others use OS.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// TmpSuffix is appended to the path of a file being written.
const TmpSuffix = ".tmp"

// ownerOnly keeps only the owner's bits of perm: coupond's files are never
// readable by group or others.
func ownerOnly(perm fs.FileMode) fs.FileMode { return perm & 0o700 }

// File is a file being written whole. Write to it, then Commit or Abort;
// deferring Abort right after Create is the intended pattern, since Abort
// after Commit does nothing. It is not safe for concurrent use.
type File struct {
	fsys FS
	path string
	f    Handle
	done bool
}

// Create starts writing path: the bytes go to path+TmpSuffix, a new file
// with perm's owner bits only (0600 for 0644), until Commit. A file already
// at path is replaced only when Commit succeeds. Whatever is at
// path+TmpSuffix (a stale one, or a file or symbolic link another user
// planted in a shared directory such as /tmp) is removed, never opened:
// the temporary file is created anew (O_EXCL, which follows no link), so
// the bytes never go into another user's file, nor through a link into a
// file elsewhere, and the file that appears at path is this user's, with
// perm's owner bits.
func Create(path string, perm fs.FileMode) (*File, error) { return CreateFS(OS{}, path, perm) }

// CreateFS is Create on fsys.
func CreateFS(fsys FS, path string, perm fs.FileMode) (*File, error) {
	tmp := path + TmpSuffix
	flag := os.O_CREATE | os.O_EXCL | os.O_WRONLY
	f, err := fsys.OpenFile(tmp, flag, ownerOnly(perm))
	if errors.Is(err, fs.ErrExist) {
		// Removing a link removes the link, not its target; one planted
		// again before the second open makes Create fail, not follow it.
		if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		f, err = fsys.OpenFile(tmp, flag, ownerOnly(perm))
	}
	if err != nil {
		return nil, err
	}
	return &File{fsys: fsys, path: path, f: f}, nil
}

// Write writes to the temporary file.
func (a *File) Write(p []byte) (int, error) { return a.f.Write(p) }

// Commit fsyncs the temporary file, renames it to its path and fsyncs the
// directory: the file is durable once Commit returns nil. On an error
// before the rename the temporary file is removed and nothing appears at
// path (an older file there is left as it was); when only the directory
// fsync fails, the complete file is in place but its rename may not
// survive a crash. Commit after Commit or Abort returns an error.
func (a *File) Commit() error {
	if a.done {
		return errors.New("atomicfile: already committed or aborted")
	}
	a.done = true
	tmp := a.f.Name()
	err := syncClose(a.f)
	if err == nil {
		err = a.fsys.Rename(tmp, a.path)
	}
	if err != nil {
		a.fsys.Remove(tmp)
		return err
	}
	return SyncDirFS(a.fsys, filepath.Dir(a.path))
}

// Abort discards what was written and removes the temporary file. It does
// nothing after Commit or a previous Abort.
func (a *File) Abort() error {
	if a.done {
		return nil
	}
	a.done = true
	a.f.Close()
	if err := a.fsys.Remove(a.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Write writes path whole with what fn writes (see Create and Commit): on
// any error, fn's included, path is left as it was.
func Write(path string, perm fs.FileMode, fn func(w io.Writer) error) error {
	a, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer a.Abort()
	if err := fn(a); err != nil {
		return err
	}
	return a.Commit()
}

// WriteBytes writes path whole with data (see Write).
func WriteBytes(path string, perm fs.FileMode, data []byte) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Append appends data, whole lines ending in '\n', to path (created with
// perm's owner bits if missing) and fsyncs it before returning: one
// durable record of an append-only log of lines. A last line left without
// its newline (an append cut short by a crash or a full disk, never
// acknowledged, so retried) is cut off first: written after it, data
// would join it into one line that does not parse.
func Append(path string, perm fs.FileMode, data []byte) error {
	return AppendFS(OS{}, path, perm, data)
}

// AppendFS is Append on fsys.
func AppendFS(fsys FS, path string, perm fs.FileMode, data []byte) error {
	f, err := fsys.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_RDWR, ownerOnly(perm))
	if err != nil {
		return err
	}
	if err := cutTornLine(f); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cutTornLine truncates f after its last newline when it does not end
// with one.
func cutTornLine(f Handle) error {
	info, err := f.Stat()
	if err != nil || info.Size() == 0 {
		return err
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, info.Size()-1); err != nil {
		return err
	}
	if last[0] == '\n' {
		return nil
	}
	data := make([]byte, info.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return err
	}
	return f.Truncate(int64(bytes.LastIndexByte(data, '\n') + 1))
}

// CreateEmpty creates an empty file at path with perm, synced with its
// directory; it fails with fs.ErrExist when path is there, so that of
// callers racing for one path exactly one succeeds (a claim).
func CreateEmpty(path string, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if err := syncClose(f); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a directory, so that a rename or a new file inside it is
// durable.
func SyncDir(dir string) error { return SyncDirFS(OS{}, dir) }

// SyncDirFS is SyncDir on fsys.
func SyncDirFS(fsys FS, dir string) error {
	d, err := fsys.OpenFile(dir, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	if err := syncClose(d); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// syncClose fsyncs f and closes it, returning the first error.
func syncClose(f interface {
	Sync() error
	Close() error
}) error {
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
