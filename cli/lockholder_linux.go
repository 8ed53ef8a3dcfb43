package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// lockHolderOf is the process that holds the lock file at path, which
// LockDataDir failed to take with lockErr: the pid fcntl(F_GETLK) reports
// and, from /proc, its command (commandOf). Only a lock refused by another
// process (EAGAIN, EACCES) is looked at: one held in this process (Pebble
// refuses it before fcntl) must not be, since closing a descriptor of the
// file would release this process's own lock on it.
func lockHolderOf(path string, lockErr error) lockHolder {
	if !errors.Is(lockErr, syscall.EAGAIN) && !errors.Is(lockErr, syscall.EACCES) {
		return lockHolder{}
	}
	f, err := os.Open(path)
	if err != nil {
		return lockHolder{}
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK || lk.Pid <= 0 {
		return lockHolder{}
	}
	h := lockHolder{pid: int(lk.Pid)}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", lk.Pid))
	if err == nil && len(cmdline) > 0 {
		h.command, h.serve = commandOf(strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"))
	}
	return h
}
