package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/internal/syncbuf"
	"github.com/coupond/coupond/privacy"
)

// TestHoldDataDirLock is the helper process of the lock tests: it holds
// the data dir's lock (COUPOND_TEST_HOLD_LOCK) until its stdin closes. Its
// command line ends with the coupond command it plays ("admin restore").
func TestHoldDataDirLock(t *testing.T) {
	dir := os.Getenv("COUPOND_TEST_HOLD_LOCK")
	if dir == "" {
		t.Skip("the helper process of the data dir lock tests")
	}
	lock, err := privacy.LockDataDir(dir)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	lock.Close()
	os.Exit(0)
}

// holdLock holds dir's lock in another process whose command line ends
// with words, and returns its pid and what releases the lock (the process
// then exits).
func holdLock(t *testing.T, dir string, words ...string) (pid int, release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestHoldDataDirLock$", "--"}, words...)...)
	cmd.Env = append(os.Environ(), "COUPOND_TEST_HOLD_LOCK="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "locked\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper process: %q", line)
	}
	released := false
	release = func() {
		if !released {
			released = true
			stdin.Close()
			cmd.Wait()
		}
	}
	t.Cleanup(release)
	return cmd.Process.Pid, release
}

// serveIn runs serve on dir in process, its log to logs, and returns its
// outcome's channel and what stops it.
func serveIn(dir string, logs io.Writer) (served chan error, stop func()) {
	ctx, stop := context.WithCancel(context.Background())
	served = make(chan error, 1)
	go func() {
		served <- Run(ctx, []string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--console-addr", "", "--disk-reserve", "0"}, nil, io.Discard, logs)
	}()
	return served, stop
}

// TestServeWaitsForAnAdminCommandsLock: serve started while an admin
// command run without a server (a restore) holds the data dir's lock
// waits for it, logging which process holds it, and serves once it ends.
// It exited 1 at once: under systemd (Restart=on-failure, RestartSec=2,
// at most 5 starts in 10 s) a restore longer than that left the service
// failed.
func TestServeWaitsForAnAdminCommandsLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	pid, release := holdLock(t, dir, "admin", "restore", "--from", "/var/backups/x")
	logs := &syncbuf.Buffer{}
	served, stop := serveIn(dir, logs)
	defer stop()
	want := fmt.Sprintf("data dir in use by process %d (coupond admin restore)", pid)
	waitFor(t, 20*time.Second, "serve to log who holds the lock", func() bool { return strings.Contains(logs.String(), want) })
	select {
	case err := <-served:
		t.Fatalf("serve ended while the lock was held: %v\n%s", err, logs)
	case <-time.After(2 * lockPoll):
	}
	release()
	waitFor(t, 20*time.Second, "the admin socket once the lock is free", func() bool {
		c, err := net.Dial("unix", filepath.Join(dir, adminSocket))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	stop()
	if err := <-served; err != nil {
		t.Errorf("serve: %v\n%s", err, logs)
	}
	if n := strings.Count(logs.String(), want); n != 1 {
		t.Errorf("serve logged who holds the lock %d times within a minute, want once:\n%s", n, logs)
	}
}

// TestServeStopsWhileWaitingForTheLock: serve told to stop (SIGTERM)
// while it waits for the data dir's lock ends at once, exit 0.
func TestServeStopsWhileWaitingForTheLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	holdLock(t, dir, "admin", "restore")
	logs := &syncbuf.Buffer{}
	served, stop := serveIn(dir, logs)
	waitFor(t, 20*time.Second, "serve to wait for the lock", func() bool { return strings.Contains(logs.String(), "data dir in use by") })
	stop()
	select {
	case err := <-served:
		if err != nil || !strings.Contains(logs.String(), "stopped while waiting for the data dir") {
			t.Errorf("serve stopped while waiting for the lock: %v\n%s", err, logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve still waiting for the lock 10 s after it was told to stop")
	}
}

// TestServeRefusesAnotherServesLock: serve on a data dir another serve
// holds exits 1 at once, naming it: two servers on one data dir are a
// mistake to report, not one to wait out.
func TestServeRefusesAnotherServesLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	pid, _ := holdLock(t, dir, "serve", "--data-dir", dir)
	served, stop := serveIn(dir, io.Discard)
	defer stop()
	select {
	case err := <-served:
		want := fmt.Sprintf("data dir %s is in use by another coupond serve, process %d (coupond serve): two servers cannot share a data dir; "+
			"stop that one, or give this one its own --data-dir", dir, pid)
		if diff := cmp.Diff(want, fmt.Sprint(err)); diff != "" {
			t.Errorf("serve beside another serve (-want +got):\n%s", diff)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve beside another serve still running after 10 s: it waits instead of exiting")
	}
}

// TestCommandOf: the holder of a data dir's lock is named by its coupond
// command, never a flag's value.
func TestCommandOf(t *testing.T) {
	for _, tc := range []struct {
		argv    []string
		command string
		serve   bool
	}{
		{[]string{"/usr/local/bin/coupond", "serve", "--data-dir", "/var/lib/coupond"}, "coupond serve", true},
		{[]string{"coupond", "--data-dir", "/d", "serve"}, "coupond serve", true},
		{[]string{"coupond", "admin", "restore", "--from", "/b", "--data-dir", "/d"}, "coupond admin restore", false},
		{[]string{"coupond", "admin", "backups", "prune", "--dry-run"}, "coupond admin backups prune", false},
		{[]string{"coupond", "admin", "tenant", "create", "acme"}, "coupond admin tenant create", false},
		{[]string{"/usr/bin/python3", "hold.py"}, "python3", false},
		{nil, "", false},
	} {
		command, serve := commandOf(tc.argv)
		if command != tc.command || serve != tc.serve {
			t.Errorf("commandOf(%q) = %q, %v; want %q, %v", tc.argv, command, serve, tc.command, tc.serve)
		}
	}
}
