//go:build linux

package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
)

// adminRun is the outcome of one admin command line run through Run.
type adminRun struct {
	Out  string
	Exit int
	Err  string
}

func runLine(t *testing.T, args ...string) adminRun {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(context.Background(), args, strings.NewReader(""), &out, &errOut)
	r := adminRun{Out: out.String(), Exit: ExitCode(err)}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// TestAdminSameThroughSocket: an admin command line gives the same output,
// exit code and error through a live server's admin socket as with the
// store opened directly, wherever the command line puts its flags (cobra
// takes --data-dir before the subcommand).
func TestAdminSameThroughSocket(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if r := runLine(t, "admin", "tenant", "create", "acme", "--sandbox", "--data-dir", dir); r.Exit != 0 {
		t.Fatalf("tenant create: %+v", r)
	}
	lines := [][]string{
		{"admin", "tenant", "show", "acme", "--json", "--data-dir", dir},
		{"--data-dir", dir, "admin", "tenant", "show", "acme", "--json"},
		{"--data-dir=" + dir, "admin", "tenant", "show", "acme"},
		{"--data-dir", dir, "admin", "tenant", "show", "nadie"},
	}
	offline := make([]adminRun, len(lines))
	for i, args := range lines {
		offline[i] = runLine(t, args...)
	}
	serveAdminOn(t, dir)
	// A line that is no admin command is refused, and the client says so.
	if err := forwardAdmin(context.Background(), filepath.Join(dir, adminSocket), adminWait{adminDial, defaultAdminTotal}, []string{"--data-dir", dir, "version"}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "bad admin request") {
		t.Errorf("a non-admin line through the socket: %v, want the refusal as an error", err)
	}
	for i, args := range lines {
		if diff := cmp.Diff(offline[i], runLine(t, args...)); diff != "" {
			t.Errorf("%v: through the socket (-offline +socket):\n%s", args, diff)
		}
	}
}

// TestAdminEnvironmentThroughSocket: an admin command's flags set by the
// client's environment (COUPOND_<FLAG>) reach the running server, and the
// server's own environment sets none of them: the same command, same
// environment, prints the same through the socket as offline.
func TestAdminEnvironmentThroughSocket(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if r := runLine(t, "admin", "tenant", "create", "acme", "--sandbox", "--data-dir", dir); r.Exit != 0 {
		t.Fatalf("tenant create: %+v", r)
	}
	show := []string{"admin", "tenant", "show", "acme", "--data-dir", dir}
	os.Unsetenv("COUPOND_JSON")
	table := runLine(t, show...)
	t.Setenv("COUPOND_JSON", "true")
	asJSON := runLine(t, show...)
	if table.Out == asJSON.Out {
		t.Fatal("COUPOND_JSON changed nothing offline")
	}
	for _, tc := range []struct {
		name           string
		server, client bool // COUPOND_JSON=true in serve's, the client's environment
		want           adminRun
	}{
		{"server's environment", true, false, table},
		{"client's environment", false, true, asJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setJSONEnv(tc.server)
			in := startServer(t, dir)
			defer in.killIfRunning()
			setJSONEnv(tc.client)
			if diff := cmp.Diff(tc.want, runLine(t, show...)); diff != "" {
				t.Errorf("through the socket (-offline +socket):\n%s", diff)
			}
			in.stop()
		})
	}
}

func setJSONEnv(on bool) {
	if on {
		os.Setenv("COUPOND_JSON", "true")
	} else {
		os.Unsetenv("COUPOND_JSON")
	}
}

// TestShutdownEndsAdminCommands: serve, told to stop, ends the admin
// commands still running through its socket (a profile sampling for ten
// minutes here) instead of waiting out its shutdown delay for them and then
// closing the store under them; the client learns that its command ended.
func TestShutdownEndsAdminCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- Run(ctx, []string{"serve", "--data-dir", dir, "--addr", "127.0.0.1:0", "--console-addr", "", "--disk-reserve", "0"}, nil, io.Discard, io.Discard)
	}()
	waitFor(t, 20*time.Second, "the admin socket", func() bool {
		c, err := net.Dial("unix", filepath.Join(dir, adminSocket))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	profiled := make(chan error, 1)
	go func() {
		profiled <- Run(context.Background(), []string{"admin", "debug", "pprof", "--kind", "mutex", "--seconds", "600",
			"--out", filepath.Join(t.TempDir(), "mutex.pprof"), "--data-dir", dir}, nil, io.Discard, io.Discard)
	}()
	// The command samples once it has raised the mutex profile rate.
	waitFor(t, 20*time.Second, "the profile to start", func() bool { return runtime.SetMutexProfileFraction(-1) > 0 })
	stop()
	for _, c := range []struct {
		what string
		ch   chan error
		fail bool
	}{{"admin debug pprof", profiled, true}, {"serve", served, false}} {
		select {
		case err := <-c.ch:
			if (err != nil) != c.fail {
				t.Errorf("%s returned %v", c.what, err)
			}
		case <-time.After(15 * time.Second): // serve's own drain limit is 20 s
			t.Fatalf("%s still running 15 s after serve was told to stop", c.what)
		}
	}
}

// TestAdminStderrThroughSocket: what an admin command writes to stderr
// reaches the admin client's stderr through the socket, as it does offline.
// Inside serve it went to a buffer that was thrown away, so 'admin batch
// watch --json --progress plain' showed no progress at all against a
// running server, the one place where jobs run.
func TestAdminStderrThroughSocket(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	job := completedJob(t, dir)
	line := []string{"admin", "batch", "watch", "--tenant", "acme", "--json", "--progress", "plain", job, "--data-dir", dir}
	type outcome struct{ Out, Err string }
	run := func() outcome {
		stdout, stderr, err := runCLI(t, line...)
		if err != nil {
			t.Fatalf("%v: %v", line, err)
		}
		return outcome{stdout, stderr}
	}
	offline := run()
	if !strings.Contains(offline.Err, "completed") {
		t.Fatalf("offline stderr lacks the summary: %q", offline.Err)
	}
	serveAdminOn(t, dir)
	if diff := cmp.Diff(offline, run()); diff != "" {
		t.Errorf("through the socket (-offline +socket):\n%s", diff)
	}
	// A client of an earlier release asks for no streams: its answer's body
	// is stdout alone, unframed.
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, adminSocket))
	}}}
	body, _ := json.Marshal(adminRequest{Args: line})
	resp, err := client.Post("http://admin/run", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil || string(got) != offline.Out || resp.Header.Get(adminFramed) != "" {
		t.Errorf("answer to a client without streams (%v, framed %q):\n%s", err, resp.Header.Get(adminFramed), got)
	}
}

// TestAdminEnvironmentBeforeTerminator: flags set by the client's
// environment reach the server as flags also when the command line ends
// its flags with "--": they were appended after it, where the server took
// them for arguments ("accepts 1 arg(s), received 2") although the same
// line ran offline.
func TestAdminEnvironmentBeforeTerminator(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if r := runLine(t, "admin", "tenant", "create", "acme", "--sandbox", "--data-dir", dir); r.Exit != 0 {
		t.Fatalf("tenant create: %+v", r)
	}
	t.Setenv("COUPOND_DATA_DIR", dir)
	t.Setenv("COUPOND_JSON", "true")
	line := []string{"admin", "tenant", "show", "--", "acme"}
	offline := runLine(t, line...)
	if offline.Exit != 0 || !strings.HasPrefix(offline.Out, "{") {
		t.Fatalf("offline: %+v", offline)
	}
	serveAdminOn(t, dir)
	if diff := cmp.Diff(offline, runLine(t, line...)); diff != "" {
		t.Errorf("through the socket (-offline +socket):\n%s", diff)
	}
	// serve logs the command, not the flags now in front of it.
	forwarded := []string{"--data-dir=" + dir, "--json=true", "admin", "tenant", "show", "--", "acme"}
	if diff := cmp.Diff([]string{"admin", "tenant", "show"}, commandPath(newRoot(&app{}), forwarded)); diff != "" {
		t.Errorf("commandPath (-want +got):\n%s", diff)
	}
}

// TestAdminLongErrorThroughSocket: an error too long for the answer's
// trailer (it echoes an 8 KB tenant id) reaches the client cut short, with
// its exit code; the client reported "admin socket: http: suspiciously long
// trailer after chunked body" instead.
func TestAdminLongErrorThroughSocket(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if r := runLine(t, "admin", "tenant", "create", "acme", "--data-dir", dir); r.Exit != 0 {
		t.Fatalf("tenant create: %+v", r)
	}
	serveAdminOn(t, dir)
	r := runLine(t, "admin", "tenant", "show", strings.Repeat("ñ", 4000), "--data-dir", dir)
	if r.Exit != 1 || !strings.HasPrefix(r.Err, `no tenant "ñññ`) || len(r.Err) > maxErrorTrailer+len("…") {
		t.Errorf("through the socket: exit %d, error (%d bytes) %.100q", r.Exit, len(r.Err), r.Err)
	}
}

// TestConsoleLoginWithoutConsole: through the socket of a server that
// serves no console, "admin console login" is an error that says so,
// not a link to a listener nobody runs.
func TestConsoleLoginWithoutConsole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if r := runLine(t, "admin", "tenant", "create", "acme", "--data-dir", dir); r.Exit != 0 {
		t.Fatalf("tenant create: %+v", r)
	}
	serveAdminOn(t, dir)
	r := runLine(t, "admin", "console", "login", "--data-dir", dir)
	if r.Exit != 1 || !strings.Contains(r.Err, "--console-addr") || strings.Contains(r.Out, "/login?t=") {
		t.Errorf("console login against a server without a console: %+v; want an error naming --console-addr and no link", r)
	}
}

// TestConsoleLoginConsoleAddrTaken: when serve could not listen on its
// --console-addr (the port was taken; the API serves without the console),
// "admin console login" says so; it said the running server's
// --console-addr was empty, sending the operator to a flag that was set.
func TestConsoleLoginConsoleAddrTaken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	serveInProcess(t, dir, "--console-addr", addr)
	r := runLine(t, "admin", "console", "login", "--data-dir", dir)
	want := "the running server serves no console: --console-addr " + addr + " failed at its start (listen tcp " + addr + ": bind: address already in use)"
	if r.Exit != 1 || !strings.Contains(r.Err, want) || strings.Contains(r.Err, "is empty") || strings.Contains(r.Out, "/login?t=") {
		t.Errorf("console login beside a server whose console port was taken: %+v; want %q and no link", r, want)
	}
}

// serveAdminOn opens the store in dir and answers its admin socket, as
// serve does, until the test ends.
func serveAdminOn(t *testing.T, dir string) {
	t.Helper()
	e, err := openEnv(context.Background(), dir, zerolog.Nop(), serviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.close() })
	srv, err := serveAdmin(context.Background(), filepath.Join(dir, adminSocket), e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
}

// TestPprofWritesWhole: admin debug pprof writes --out whole and owner-only
// (atomicfile): a profile that fails leaves the file that was at --out as
// it was and no temporary file (it was truncated at the start and removed
// on the failure), and one that succeeds replaces it with mode 0600 (a
// file there before kept its 0644).
func TestPprofWritesWhole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	serveAdminOn(t, dir)
	out := filepath.Join(t.TempDir(), "cpu.pprof")
	if err := os.WriteFile(out, []byte("earlier profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A CPU profile running in this process (the server's) makes the
	// server's one fail at once.
	if err := pprof.StartCPUProfile(io.Discard); err != nil {
		t.Skipf("a CPU profile is already running: %v", err)
	}
	_, _, err := runCLI(t, "admin", "debug", "pprof", "--kind", "cpu", "--seconds", "1", "--out", out, "--data-dir", dir)
	pprof.StopCPUProfile()
	if err == nil {
		t.Fatal("cpu profile while another runs: no error")
	}
	type file struct {
		Data string
		Mode os.FileMode
	}
	read := func() file {
		b, err := os.ReadFile(out)
		st, serr := os.Stat(out)
		if err != nil || serr != nil {
			return file{Data: "error: " + errors.Join(err, serr).Error()}
		}
		return file{Data: string(b[:min(len(b), 2)]), Mode: st.Mode().Perm()}
	}
	if diff := cmp.Diff(file{"ea", 0o644}, read()); diff != "" {
		t.Errorf("--out after a failed profile (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(out + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left after a failed profile: %v", err)
	}
	if _, stderr, err := runCLI(t, "admin", "debug", "pprof", "--kind", "heap", "--out", out, "--data-dir", dir); err != nil {
		t.Fatalf("heap profile: %v\n%s", err, stderr)
	}
	if diff := cmp.Diff(file{"\x1f\x8b", 0o600}, read()); diff != "" {
		t.Errorf("--out after a heap profile (-want +got; want a gzipped profile):\n%s", diff)
	}
}

// TestPprofOutDirectory: an --out that is a directory is an error naming
// --out before any sampling, and nothing is written beside it; it sampled
// first and then failed with "rename DIR.tmp DIR: file exists".
func TestPprofOutDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	serveAdminOn(t, dir)
	parent := t.TempDir()
	for _, out := range []string{parent, filepath.Join(parent, "full")} {
		if out != parent {
			if err := os.Mkdir(out, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(out, "x"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := runCLI(t, "admin", "debug", "pprof", "--kind", "heap", "--out", out, "--data-dir", dir)
		if err == nil || !strings.Contains(err.Error(), "--out "+out+" is a directory") {
			t.Errorf("pprof --out %s: %v, want an error saying --out is a directory", out, err)
		}
		if _, err := os.Stat(out + ".tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pprof --out %s left %s.tmp: %v", out, out, err)
		}
	}
}

// TestPprofJSON: admin debug pprof --json prints one JSON value on stdout,
// as every admin command does (it printed nothing there, only the line on
// stderr), naming the kind, the file and its size; the profile still goes
// to --out only.
func TestPprofJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	runIn(t, dir, "admin", "tenant", "create", "acme")
	serveAdminOn(t, dir)
	out := filepath.Join(t.TempDir(), "heap.pprof")
	stdout, stderr, err := runCLI(t, "admin", "debug", "pprof", "--kind", "heap", "--out", out, "--data-dir", dir, "--json")
	if err != nil {
		t.Fatalf("pprof --json: %v\n%s", err, stderr)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		Kind  string `json:"kind"`
		Out   string `json:"out"`
		Bytes int64  `json:"bytes"`
	}
	var got result
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not one JSON value: %v\n%q", err, stdout)
	}
	if diff := cmp.Diff(result{"heap", out, st.Size()}, got); diff != "" {
		t.Errorf("pprof --json (-want +got):\n%s", diff)
	}
	if stderr != "" {
		t.Errorf("stderr with --json: %q; want nothing", stderr)
	}
}

// TestForwardAdminStuckServer: a server that accepts the admin connection
// and never answers (stuck), whether it reads the request or not, makes
// the forwarded command an error that names the socket and says what to
// do once the deadline passes, not a client that hangs.
func TestForwardAdminStuckServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		read bool // the server reads the request before it stalls
	}{{"never reads", false}, {"reads, never answers", true}} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), adminSocket)
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			t.Cleanup(func() { close(release); ln.Close() })
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer conn.Close()
						if tc.read {
							_, _ = io.Copy(io.Discard, io.LimitReader(conn, 1))
						}
						<-release
					}()
				}
			}()
			done := make(chan error, 1)
			go func() {
				done <- forwardAdmin(context.Background(), sock, adminWait{dial: time.Second, total: 200 * time.Millisecond},
					[]string{"admin", "tenant", "list"}, io.Discard, io.Discard)
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "within 200ms") ||
					!strings.Contains(err.Error(), "serve's log") {
					t.Errorf("forwardAdmin to a stuck server: %v; want an error naming %s, the deadline and what to do", err, sock)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("forwardAdmin to a stuck server still waits after 10s")
			}
		})
	}
}

// TestAdminWaitOf: a command forwarded through the socket waits
// defaultAdminTotal, unless it is one whose work grows with the store,
// which waits longer.
func TestAdminWaitOf(t *testing.T) {
	root := newRoot(&app{})
	for _, tc := range []struct {
		line []string
		want time.Duration
	}{
		{[]string{"admin", "tenant", "show"}, defaultAdminTotal},
		{[]string{"admin", "backup"}, longAdmin},
		{[]string{"admin", "backups"}, longAdmin}, // --verify reads every backup whole
		{[]string{"admin", "backups", "prune"}, defaultAdminTotal},
		{[]string{"admin", "check"}, longAdmin},
		{[]string{"admin", "evaluate"}, longAdmin},
		{[]string{"admin", "shadow", "report"}, longAdmin},
		{[]string{"admin", "clock", "advance"}, longAdmin},
		{[]string{"admin", "batch", "watch"}, 24 * time.Hour},
		{[]string{"admin", "debug", "pprof"}, 15 * time.Minute},
	} {
		cmd, _, err := root.Find(tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(adminWait{dial: adminDial, total: tc.want}, adminWaitOf(cmd), cmp.AllowUnexported(adminWait{})); diff != "" {
			t.Errorf("%v (-want +got):\n%s", tc.line, diff)
		}
	}
}

// TestConsoleLoginWithoutServer: with no serve running on the data dir,
// "admin console login" still prints the link (serve may be started next)
// and says on stderr that nothing serves it yet; it printed the link alone,
// which then failed in the browser with no hint why.
func TestConsoleLoginWithoutServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if r := runLine(t, "admin", "tenant", "create", "acme", "--data-dir", dir); r.Exit != 0 {
		t.Fatalf("tenant create: %+v", r)
	}
	var out, errOut bytes.Buffer
	err := Run(context.Background(), []string{"admin", "console", "login", "--data-dir", dir}, strings.NewReader(""), &out, &errOut)
	if err != nil || !strings.Contains(out.String(), "/login?t=") || !strings.Contains(errOut.String(), "No coupond serve is running") {
		t.Errorf("console login without a server: %v, out %q, err %q; want the link and a note that no serve runs", err, out.String(), errOut.String())
	}
}

// TestAdminServerGoneMidCommand: a server that stops (killed, restarted in
// place) while a forwarded command streams its answer leaves the client an
// error that says so and that the command may have run; it said only
// "admin socket: unexpected EOF" ("admin batch watch" across a kill -9).
func TestAdminServerGoneMidCommand(t *testing.T) {
	sock := filepath.Join(t.TempDir(), adminSocket)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // one answer: a frame of stdout, then the connection drops
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		frame := append([]byte{streamOut, 0, 0, 0, 5}, "hello"...)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%s: 1\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", adminFramed, len(frame), frame)
	}()
	var out, errOut bytes.Buffer
	err = forwardAdmin(t.Context(), sock, adminWait{dial: time.Second, total: time.Minute}, []string{"admin", "batch", "watch"}, &out, &errOut)
	if out.String() != "hello" {
		t.Errorf("stdout before the drop: %q, want %q", out.String(), "hello")
	}
	for _, want := range []string{sock, "closed the connection before the command ended", "may have run"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want one that says %q", err, want)
		}
	}
}
