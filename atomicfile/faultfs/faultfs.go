// Package faultfs gives tests an atomicfile.FS whose writes fail when the
// test says so (a full disk, an I/O error), then go through again, as
// store/storefs does for the store's file system. Production code uses
// atomicfile.OS and never needs this package.
package faultfs

import (
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/coupond/coupond/atomicfile"
)

// Kind is the kind of a call that writes.
type Kind int

// The calls that write.
const (
	Open   Kind = iota // OpenFile for writing (create, truncate, append)
	Write              // Handle.Write
	Sync               // Handle.Sync, a directory's too
	Trunc              // Handle.Truncate
	Rename             // FS.Rename
	Mkdir              // FS.MkdirAll
)

// Op is one call that writes.
type Op struct {
	Kind Kind
	Path string
	// N counts the calls that wrote or were asked to before this one (0
	// for the first), faults included.
	N int
}

// FS is an atomicfile.FS over another whose every call that writes first
// asks the fault function: a non-nil answer is the call's error and
// nothing is done. Reads, Remove and read-only opens always go through
// (deletions need no space). It is safe for concurrent use.
type FS struct {
	base atomicfile.FS

	mu    sync.Mutex
	n     int
	fault func(Op) error
}

// New returns base with faults (fault nil: none until SetFault).
func New(base atomicfile.FS, fault func(Op) error) *FS {
	return &FS{base: base, fault: fault}
}

// SetFault replaces the fault function (nil: every call goes through).
func (f *FS) SetFault(fault func(Op) error) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

// NoSpace is the error of a write on a full disk: ENOSPC, as os gives it.
func NoSpace(op Op) error {
	return &fs.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
}

// check counts a call that writes and returns its fault.
func (f *FS) check(k Kind, path string) error {
	f.mu.Lock()
	op := Op{Kind: k, Path: path, N: f.n}
	f.n++
	fault := f.fault
	f.mu.Unlock()
	if fault == nil {
		return nil
	}
	return fault(op)
}

// OpenFile opens name on the base FS; an open for writing may fail.
func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (atomicfile.Handle, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0 {
		if err := f.check(Open, name); err != nil {
			return nil, err
		}
	}
	h, err := f.base.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &handle{Handle: h, fs: f}, nil
}

// Rename renames on the base FS, unless it fails.
func (f *FS) Rename(oldpath, newpath string) error {
	if err := f.check(Rename, newpath); err != nil {
		return err
	}
	return f.base.Rename(oldpath, newpath)
}

// Remove removes on the base FS: it never fails by a fault.
func (f *FS) Remove(name string) error { return f.base.Remove(name) }

// MkdirAll creates on the base FS, unless it fails.
func (f *FS) MkdirAll(path string, perm fs.FileMode) error {
	if err := f.check(Mkdir, path); err != nil {
		return err
	}
	return f.base.MkdirAll(path, perm)
}

// handle is an open file whose writes, syncs and truncations may fail.
type handle struct {
	atomicfile.Handle
	fs *FS
}

func (h *handle) Write(p []byte) (int, error) {
	if err := h.fs.check(Write, h.Name()); err != nil {
		return 0, err
	}
	return h.Handle.Write(p)
}

func (h *handle) Sync() error {
	if err := h.fs.check(Sync, h.Name()); err != nil {
		return err
	}
	return h.Handle.Sync()
}

func (h *handle) Truncate(size int64) error {
	if err := h.fs.check(Trunc, h.Name()); err != nil {
		return err
	}
	return h.Handle.Truncate(size)
}
