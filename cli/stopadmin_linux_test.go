package cli

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coupond/coupond/internal/syncbuf"
	"github.com/coupond/coupond/server"
)

// TestStopLeavesTheStoreToAdminCommands: an admin command still running
// inside serve when the shutdown's bound passes (an "admin check" reading
// the whole store, which the end of serve's context does not stop) keeps
// the store. Serve closed it under the command: the command's next read
// panicked (recovered as "internal error in the admin command"), and when
// the command had an iterator open at that moment Pebble's Close panicked
// with "element has outstanding references", crashing serve on SIGTERM
// (seen under mixed load with "admin check" run in a loop). The command is
// held here in its read of backups-owed.jsonl, made a FIFO, which it reads
// between the store's records and the result files and logs.
func TestStopLeavesTheStoreToAdminCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if _, _, err := runCLI(t, "admin", "tenant", "create", "acme", "--data-dir", dir); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	logs := &syncbuf.Buffer{}
	f := serveFlags{now: time.Now, addr: "127.0.0.1:0", logLevel: "info", logFormat: "json", diskReserve: "0",
		readTimeout: server.DefaultReadTimeout, maxConns: server.DefaultMaxConns, stopBound: 300 * time.Millisecond}
	served := make(chan error, 1)
	go func() { served <- serve(ctx, dir, f, logs) }()
	waitFor(t, 20*time.Second, "the admin socket", func() bool {
		c, err := net.Dial("unix", filepath.Join(dir, adminSocket))
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	fifo := filepath.Join(dir, "backups-owed.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	checked := make(chan error, 1)
	go func() {
		_, _, err := runCLI(t, "admin", "check", "--data-dir", dir)
		checked <- err
	}()
	// A writer opens a FIFO without blocking only once a reader has it
	// open: the command is then held in its read until the writer closes.
	var writer int
	waitFor(t, 20*time.Second, "admin check reading backups-owed.jsonl", func() bool {
		fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0)
		writer = fd
		return err == nil
	})
	release := func() {
		if writer >= 0 {
			syscall.Close(writer)
			writer = -1
		}
	}
	defer release()

	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		release()
		t.Fatalf("serve did not stop within 20 s of its context's end; log:\n%s", logs)
	}
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	release()
	select {
	case err := <-checked:
		var exit *ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Errorf("admin check still running at serve's stop: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("admin check did not end once its read was released")
	}
	if strings.Contains(logs.String(), "panicked") {
		t.Errorf("serve's log has a panic:\n%s", logs)
	}
}
