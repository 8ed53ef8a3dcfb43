//go:build linux

package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/coupond/coupond/server"
)

// TestInheritedListener: the image a restart in place execs takes the
// API's socket from COUPOND_LISTEN_FD when it names a socket opened for
// the same --addr, and removes the variable; a socket for another --addr
// is closed (its port freed), and a descriptor that is no socket is left
// alone.
func TestInheritedListener(t *testing.T) {
	regular, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	for _, tc := range []struct {
		name       string
		value      func(fd uintptr, addr string) string
		addr       string // serve's --addr; "" the listener's
		wantLn     bool
		wantFDOpen bool // the listener's descriptor is still open after
	}{
		{"same addr", func(fd uintptr, a string) string { return fmt.Sprintf("%d@%s", fd, a) }, "", true, false},
		{"other addr", func(fd uintptr, a string) string { return fmt.Sprintf("%d@%s", fd, a) }, "127.0.0.1:1", false, false},
		{"not a socket", func(uintptr, string) string { return fmt.Sprintf("%d@x", regular.Fd()) }, "x", false, true},
		{"garbage", func(uintptr, string) string { return "seven@x" }, "x", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			fd := rawDup(t, ln) // owned by no *os.File, whose finalizer could close a reused number
			addr := tc.addr
			if addr == "" {
				addr = ln.Addr().String()
			}
			t.Setenv(listenFDEnv, tc.value(fd, ln.Addr().String()))
			got := inheritedListener(addr, zerolog.Nop())
			_, envLeft := os.LookupEnv(listenFDEnv)
			_, fcntlErr := fcntlGetFD(fd)
			if got != nil {
				got.Close()
			}
			if fcntlErr == nil {
				syscall.Close(int(fd))
			}
			type result struct{ Listener, EnvLeft, FDOpen bool }
			want := result{tc.wantLn, false, tc.wantFDOpen}
			if diff := cmp.Diff(want, result{got != nil, envLeft, fcntlErr == nil}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// rawDup returns a duplicate of ln's descriptor as a bare number, as an
// exec'd image finds it: no *os.File owns it.
func rawDup(t *testing.T, ln net.Listener) uintptr {
	t.Helper()
	file, err := listenerForExec(ln)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var fd int
	var dupErr error
	if err := withFD(file, func(f uintptr) { fd, dupErr = syscall.Dup(int(f)) }); err != nil || dupErr != nil {
		t.Fatal(err, dupErr)
	}
	return uintptr(fd)
}

// withFD runs f with file's descriptor, without file.Fd's switch to
// blocking mode.
func withFD(file *os.File, f func(fd uintptr)) error {
	rc, err := file.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(f)
}

func fcntlGetFD(fd uintptr) (uintptr, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFD, 0)
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// TestWaitingServerOnInherited: when the image a restart in place execs
// must wait for space, its waiting server answers on the inherited
// socket, and shutting it down leaves that socket open for serve.
func TestWaitingServerOnInherited(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	srv, err := waitingServer(addr, ln, t.TempDir(), 1<<30, func() bool { return false }, server.HTTPConfig{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	status := func() int {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waiting := status()
	srv.Shutdown(context.Background())
	next := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })}
	go next.Serve(ln)
	defer next.Close()
	http.DefaultClient.CloseIdleConnections()
	if diff := cmp.Diff([]int{200, http.StatusTeapot}, []int{waiting, status()}); diff != "" {
		t.Errorf("/healthz while waiting, then from serve on the same socket (-want +got):\n%s", diff)
	}
}

// TestListenerForExecKeepsAccepting: the descriptor a restart in place
// passes on loses close-on-exec, and the API's socket, which serve still
// accepts on until its shutdown, stays non-blocking: a blocking one lets
// an Accept wait in the kernel, and the shutdown's Close of the listener
// then waits for the next client.
func TestListenerForExecKeepsAccepting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	file, err := listenerForExec(ln)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	type flags struct{ Nonblocking, CloseOnExec bool }
	got := flags{
		Nonblocking: fcntlOf(t, ln.(syscall.Conn), syscall.F_GETFL)&syscall.O_NONBLOCK != 0,
		CloseOnExec: fcntlOf(t, file, syscall.F_GETFD)&syscall.FD_CLOEXEC != 0,
	}
	if diff := cmp.Diff(flags{Nonblocking: true, CloseOnExec: false}, got); diff != "" {
		t.Errorf("the listener's socket, the passed descriptor (-want +got):\n%s", diff)
	}
}

// fcntlOf is fcntl(cmd) of c's descriptor, read without Fd (which would
// change the socket's blocking mode).
func fcntlOf(t *testing.T, c syscall.Conn, cmd int) uintptr {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var r uintptr
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) { r, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, uintptr(cmd), 0) }); err != nil {
		t.Fatal(err)
	}
	if errno != 0 {
		t.Fatal(errno)
	}
	return r
}

// TestSelfExecutable: the running test binary, unchanged, can be run
// again in place (os.Executable and /proc/self/exe name the same file).
func TestSelfExecutable(t *testing.T) {
	if _, err := selfExecutable(); err != nil {
		t.Fatal(err)
	}
}
