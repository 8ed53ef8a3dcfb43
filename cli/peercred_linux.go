//go:build linux

package cli

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// peerOf returns the credentials of the process at the other end of the
// unix socket connection c, as the kernel recorded them when it connected
// (SO_PEERCRED).
func peerOf(c net.Conn) (peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{}, errors.New("admin socket: not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{}, err
	}
	if credErr != nil {
		return peer{}, credErr
	}
	return peer{UID: int(cred.Uid), PID: int(cred.Pid), Known: true}, nil
}

// openFileLimit is the process's limit on open files (RLIMIT_NOFILE, which
// the Go runtime raises to the hard limit at start).
func openFileLimit() (uint64, bool) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return 0, false
	}
	return r.Cur, true
}
