//go:build linux

package cli

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// resumeSupported: serve can restart itself in place (resume.go).
const resumeSupported = true

// listenerForExec returns a duplicate of ln's descriptor that an exec
// keeps open (FD_CLOEXEC cleared); ln stays open, and closing it leaves
// the socket listening through the duplicate.
func listenerForExec(ln net.Listener) (*os.File, error) {
	fl, ok := ln.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, fmt.Errorf("listener %T has no descriptor", ln)
	}
	file, err := fl.File()
	if err != nil {
		return nil, err
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, file.Fd(), syscall.F_SETFD, 0); errno != 0 {
		file.Close()
		return nil, fmt.Errorf("clear close-on-exec: %w", errno)
	}
	return file, nil
}

// execSelf replaces the process's image with its own binary, arguments
// and environment, passing listener on (listenFDEnv). It returns only on
// failure.
func execSelf(listener *os.File, addr string) error {
	exe, err := selfExecutable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, execEnv(listener.Fd(), addr))
}

// isSocket reports whether fd is an open socket.
func isSocket(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK
}
