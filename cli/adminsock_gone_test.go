package cli

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestAdminServerGoneBeforeOutput: a server that stops (killed, its
// connections cut) while a forwarded command runs and has written
// nothing yet (a ten-minute profile here) leaves the client the error that
// says so and that the command may have run, as when it stops mid-output
// (TestAdminServerGoneMidCommand); it said only 'admin socket: Post
// "http://admin/run": EOF', the answer's header not being sent before the
// command's first output.
func TestAdminServerGoneBeforeOutput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	e, err := openEnv(context.Background(), dir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	srv, err := serveAdmin(context.Background(), filepath.Join(dir, adminSocket), e)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := runCLI(t, "admin", "debug", "pprof", "--kind", "mutex", "--seconds", "600",
			"--out", filepath.Join(t.TempDir(), "mutex.pprof"), "--data-dir", dir)
		done <- err
	}()
	waitFor(t, 20*time.Second, "the profile to start", func() bool { return runtime.SetMutexProfileFraction(-1) > 0 })
	srv.Close() // every connection cut, as a kill -9 does
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the client still waits 15 s after the server stopped")
	}
	for _, want := range []string{"closed the connection before the command ended", "may have run"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want one that says %q", err, want)
		}
	}
}
