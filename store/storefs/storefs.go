// Package storefs gives the tests of packages above store the file systems
// a store can run on, so that no package but store and its own sub-packages
// imports Pebble: in memory, in memory with a settable disk usage and crash
// clones, and with injected write faults. Production code opens a store
// with store.Open(dir, nil) (the disk) and never needs this package.
package storefs

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// FS is the file system a store runs on (store.Open's second argument).
type FS = vfs.FS

// MemFS is an in-memory file system whose disk usage a test can set
// (TestingSetDiskUsage) and whose synced state it can clone as after a
// crash (CrashClone).
type MemFS = vfs.MemFS

// DiskUsage is what a MemFS reports as free and total space.
type DiskUsage = vfs.DiskUsage

// CrashCloneCfg configures MemFS.CrashClone; the zero value keeps exactly
// what was synced.
type CrashCloneCfg = vfs.CrashCloneCfg

// Mem returns an empty in-memory file system.
func Mem() *MemFS { return vfs.NewMem() }

// CrashableMem returns an empty in-memory file system that remembers what
// was synced, for CrashClone.
func CrashableMem() *MemFS { return vfs.NewCrashableMem() }

// Faults is a switch for WithWriteFaults: off until On.
type Faults = errorfs.Toggle

// WithWriteFaults wraps fs so that, once the returned switch is On, every
// write fails with fail(path) (nil: the write goes through).
func WithWriteFaults(fs FS, fail func(path string) error) (FS, *Faults) {
	t := &Faults{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return fail(op.Path)
		}
		return nil
	})}
	return errorfs.Wrap(fs, t), t
}

// WithReadFaults wraps fs so that, once the returned switch is On, every
// open of an existing file and every read fails with fail(path) (nil: it
// goes through). Writes go through.
func WithReadFaults(fs FS, fail func(path string) error) (FS, *Faults) {
	t := &Faults{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpOpen || op.Kind == errorfs.OpFileRead || op.Kind == errorfs.OpFileReadAt {
			return fail(op.Path)
		}
		return nil
	})}
	return errorfs.Wrap(fs, t), t
}

// WithCreateFaults wraps fs so that, once the returned switch is On, every
// file creation (a new file; a recycled one, by its old name) fails with
// fail(path) (nil: the creation goes through). Other writes go through.
func WithCreateFaults(fs FS, fail func(path string) error) (FS, *Faults) {
	t := &Faults{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite {
			return fail(op.Path)
		}
		return nil
	})}
	return errorfs.Wrap(fs, t), t
}

// LogsInPlace wraps fs so that every new write-ahead log (*.log) comes
// with size zero bytes already in place, which its records overwrite from
// the start, as in a recycled log or a disk file whose blocks were
// allocated ahead (a reader of the log stops at the first zeroed record,
// as it does in a recycled log). For benchmarks of synced commits on Mem:
// there a log grows by copying itself whenever it outgrows its buffer, a
// cost no disk has that rises with the log's length.
func LogsInPlace(fs FS, size int) FS { return logsInPlace{FS: fs, size: size} }

type logsInPlace struct {
	FS
	size int
}

func (fs logsInPlace) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if !strings.HasSuffix(name, ".log") {
		return fs.FS.Create(name, category)
	}
	f, err := fs.FS.Create(name, category)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(make([]byte, fs.size)); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return fs.FS.OpenReadWrite(name, category)
}
