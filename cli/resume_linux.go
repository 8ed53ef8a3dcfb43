//go:build linux

package cli

import (
	"cmp"
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
	file, err := listenerFile(ln)
	if err != nil {
		return nil, err
	}
	// Through Control, not file.Fd(): Fd would put the socket, which ln
	// still serves, in blocking mode, and an Accept then waiting in the
	// kernel would hold the shutdown's Close of ln until a client came.
	rc, err := file.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFD, 0); errno != 0 {
				err = errno
			}
		})
		err = cmp.Or(err, cerr)
	}
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("clear close-on-exec: %w", err)
	}
	return file, nil
}

// selfExecutable is the path of the running binary, or why it cannot be
// executed again (runnableAs). os.Executable names the path it was
// started from, even once that path names another file.
func selfExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return runnableAs(exe, "/proc/self/exe")
}

// execSelf replaces the process's image with its own binary, arguments
// and environment, passing listener on (listenFDEnv) and why (reason,
// resumedEnv). It returns only on failure.
func execSelf(listener *os.File, addr, reason string) error {
	exe, err := selfExecutable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, execEnv(listener.Fd(), addr, reason))
}

// isSocket reports whether fd is an open socket.
func isSocket(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK
}

// freeInodes reads the free inodes of the file system holding dir;
// counted is false when it cannot be read or the file system keeps no
// count (Files 0, as some network and FUSE file systems report).
func freeInodes(dir string) (free uint64, counted bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Files == 0 {
		return 0, false
	}
	return st.Ffree, true
}
