package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// env is what admin commands act on: the running server's state when they
// run inside "serve" (through the admin socket), or the store opened by the
// admin process itself when no server runs. The same command code runs in
// both cases.
type env struct {
	db      *store.DB
	secrets *store.Secrets
	now     func() time.Time
	log     zerolog.Logger
	dataDir string
	// resultsDir is the batch results dir when it is not dataDir's
	// "results": a restore's staging copy (see resultsPath).
	resultsDir string
	svc        *services
	// lock is the data dir's (privacy.LockDataDir) when openEnv opened
	// it; close releases it.
	lock io.Closer
}

// resultsPath is the batch results dir of e.
func (e *env) resultsPath() string {
	if e.resultsDir != "" {
		return e.resultsDir
	}
	return filepath.Join(e.dataDir, "results")
}

const adminSocket = "admin.sock"

// maxSocketPath is the longest path a unix socket may have (Linux's
// sun_path holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// withEnv runs fn against the live server (forwarding the whole command line
// through the admin socket) or, when no server answers there, against the
// store opened here. Either way the command gets its line in the admin
// audit log once it has run: serve writes it through the socket, and here
// auditDirect does, while the data dir is still open and locked. A data
// dir that does not open gets none: the command ran nothing in it.
func (a *app) withEnv(cmd *cobra.Command, fn func(e *env) error) error {
	if a.live != nil {
		return fn(a.live)
	}
	sock := filepath.Join(a.dataDir, adminSocket)
	if conn, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		conn.Close()
		if err := serverOwnerError(a.dataDir, sock); err != nil {
			return err
		}
		return forwardAdmin(cmd.Context(), sock, adminWaitOf(cmd), a.args, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	if cmd.Annotations[createsDataDir] == "" {
		if err := dataDirExists(a.dataDir); err != nil {
			return err
		}
	}
	e, err := openEnv(cmd.Context(), a.dataDir, zerolog.Nop(), serviceOptions{now: a.now})
	if err != nil {
		return err
	}
	defer e.close()
	err = fn(e)
	a.auditDirect(cmd, e.dataDir, err)
	return err
}

// auditDirect appends to dataDir's admin audit log the line of the admin
// command a runs with serve stopped, having opened the data dir itself
// (viaDirect), err its outcome. A line that cannot be written (a data dir
// that is read-only, a full disk) changes nothing of the command's
// outcome, as through the socket: it is a warning on the command's stderr.
func (a *app) auditDirect(cmd *cobra.Command, dataDir string, err error) {
	l := &auditLog{path: filepath.Join(dataDir, auditFile), once: true}
	if werr := l.write(commandEntry(os.Getuid(), os.Getpid(), viaDirect, a.args, err)); werr != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), auditUnwritten, werr)
	}
}

// dataDirExists returns the error of an admin command pointed at a data
// dir that does not exist (a mistyped --data-dir, a shell without
// COUPOND_DATA_DIR), or at a directory that holds no coupond data
// (privacy.HoldsCoupondData: an empty one, or one of the operator's own
// holding only files). The command would have made such a directory
// owner-only, its files 0600, and written a new, empty store into it,
// then answered "0 tenants" (admin check: "0 records checked", exit 0) as
// if it were the server's data dir. It changes nothing.
func dataDirExists(dir string) error {
	info, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("data dir %s does not exist: pass the server's with --data-dir or COUPOND_DATA_DIR "+
			"(only serve, admin tenant create and admin restore create one)", dir)
	}
	if err != nil || !info.IsDir() {
		return nil // the store's opening says what is wrong, and whom to run as
	}
	if _, err := os.ReadDir(dir); err == nil && !privacy.HoldsCoupondData(dir) {
		return fmt.Errorf("data dir %s holds no coupond data (no db, no keys.json), nothing changed: pass the server's with --data-dir "+
			"or COUPOND_DATA_DIR (only serve, admin tenant create and admin restore start one)", dir)
	}
	return nil
}

// createsDataDir annotates the admin commands that may create a missing
// data dir; the others refuse one, so that a mistyped --data-dir is an
// error rather than a new, empty database.
const createsDataDir = "creates-data-dir"

// withTenant is withEnv for a command about tenant id: fn gets the tenant,
// and an unknown id is an error that names it.
func (a *app) withTenant(cmd *cobra.Command, id string, fn func(e *env, t *store.Tenant) error) error {
	return a.withEnv(cmd, func(e *env) error {
		t, ok := e.db.Tenant(id)
		if !ok {
			return fmt.Errorf("no tenant %q", id)
		}
		return fn(e, t)
	})
}

// updateTenant is store's UpdateTenant, with an error that names an
// unknown tenant.
func (e *env) updateTenant(id string, fn func(t *store.Tenant) error) (*store.Tenant, error) {
	t, err := e.db.UpdateTenant(id, fn)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("no tenant %q", id)
	}
	return t, err
}

// updateCredential is store's UpdateCredential, with an error that names an
// unknown credential; the change is logged as "credential <what>".
func (e *env) updateCredential(clientID, what string, fn func(c *store.Credential) error) (*store.Credential, error) {
	c, err := e.db.UpdateCredential(clientID, fn)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("no credential %q", clientID)
	}
	if err != nil {
		return nil, err
	}
	e.log.Info().Str("tenant", c.Tenant).Str("client_id", c.ClientID).Msg("credential " + what)
	return c, nil
}

// groupCmd is a command that only holds subcommands.
func groupCmd(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short}
	cmd.AddCommand(subs...)
	return cmd
}

// envCmd is an admin command that runs against the data dir's services
// (withEnv: in process, or through the running server's socket).
func (a *app) envCmd(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, args []string, e *env) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withEnv(cmd, func(e *env) error { return run(cmd, args, e) })
		},
	}
}

// tenantCmd is a command about the tenant its required --tenant names: run
// gets the data dir's services (withEnv) and that tenant.
func (a *app) tenantCmd(use, short string, run func(cmd *cobra.Command, e *env, t *store.Tenant) error) *cobra.Command {
	var tenant string
	cmd := leafCmd(use, short, func(cmd *cobra.Command) error {
		return a.withTenant(cmd, tenant, func(e *env, t *store.Tenant) error { return run(cmd, e, t) })
	})
	tenantFlag(cmd, &tenant)
	return cmd
}

// tenantFlag adds the required --tenant of a command about one tenant.
func tenantFlag(cmd *cobra.Command, tenant *string) {
	cmd.Flags().StringVar(tenant, "tenant", "", "tenant id")
	cmd.MarkFlagRequired("tenant")
}

// openEnv opens the data dir, for serve or an admin command run without a
// server, and holds its lock (privacy.LockDataDir) until close: no restore
// runs in it meanwhile. What a restore that stopped left there is dealt
// with first (privacy.RecoverInterrupted): the data dir is refused, or the
// copies of customers' data left are removed and logged. The tree is made
// owner-only (prepareDataDir) only once the lock is held, as serve does:
// walked before, it raced a running restore's staging store, whose files
// come and go, and the command failed on a vanished file ("lstat …") instead
// of being refused as in use.
func openEnv(ctx context.Context, dataDir string, log zerolog.Logger, opt serviceOptions) (*env, error) {
	if err := checkDataDir(dataDir); err != nil {
		return nil, err
	}
	lock, err := privacy.LockDataDir(dataDir)
	if err != nil {
		return nil, orAccessError(dataDir, err)
	}
	if err := prepareDataDir(dataDir); err != nil {
		lock.Close()
		return nil, err
	}
	return openEnvLocked(ctx, dataDir, lock, log, opt)
}

// openEnvLocked is openEnv for a caller that has prepared dataDir and
// holds its lock (privacy.LockDataDir): the env keeps lock until close,
// and closes it if the data dir does not open.
func openEnvLocked(ctx context.Context, dataDir string, lock io.Closer, log zerolog.Logger, opt serviceOptions) (e *env, err error) {
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	removed, err := privacy.RecoverInterrupted(dataDir)
	for _, left := range removed {
		log.Warn().Str("removed", filepath.Join(dataDir, left)).Msg("copy of a store or results left by a restore that stopped: removed")
	}
	if err != nil {
		return nil, orAccessError(dataDir, err)
	}
	secrets, err := store.LoadSecrets(dataDir)
	if err != nil {
		return nil, orAccessError(dataDir, err)
	}
	db, err := store.Open(filepath.Join(dataDir, "db"), nil)
	if err != nil {
		return nil, orAccessError(dataDir, storeOpenError(err, dataDir))
	}
	stopped := db.RotationStopped()
	if err := db.CheckSecrets(secrets, filepath.Join(dataDir, store.SecretsFile)); err != nil {
		db.Close()
		return nil, err
	}
	if stopped {
		log.Warn().Msg("a signing-key rotation that stopped (admin keys rotate cut short) is settled on the keys keys.json holds: " +
			"run admin keys rotate again if its command did not report success")
	}
	db.SetLog(log)
	now := opt.now
	if now == nil {
		now = time.Now
	}
	e = &env{db: db, secrets: secrets, now: now, log: log, dataDir: dataDir, lock: lock}
	svc, err := newServices(ctx, e, opt)
	if err != nil {
		db.Close()
		return nil, err
	}
	e.svc = svc
	return e, nil
}

// storeOpenError is the error of a store in dataDir that does not open.
// It asks whether another process uses the data dir only when the store's
// lock is what failed: the data dir's own lock is already held here, so
// that is a process that does not take it (an older release, another
// tool). A damaged store asked "is another coupond using …?" too, which
// sent the operator after a process that was not there.
func storeOpenError(err error, dataDir string) error {
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), "lock held") {
		return fmt.Errorf("%w (is another process using %s?)", err, dataDir)
	}
	return err
}

// close closes the store and releases the data dir's lock, if e holds it.
func (e *env) close() error {
	e.svc.close()
	err := e.db.Close()
	if e.lock != nil {
		e.lock.Close()
		e.lock = nil
	}
	return err
}

type adminRequest struct {
	Args     []string `json:"args"`
	Terminal bool     `json:"terminal"` // the client's stdout is a terminal
	// Streams says that the client reads a framed answer (adminFramed):
	// the command's stderr as well as its stdout. A server of an earlier
	// release ignores it and answers stdout alone.
	Streams bool `json:"streams,omitempty"`
}

// adminFramed is the header of an admin answer whose body is frames: a
// stream byte (streamOut, streamErr), the length of the bytes that follow
// (4 bytes, big endian), those bytes.
const adminFramed = "X-Admin-Streams"

// The streams of a framed admin answer.
const (
	streamOut byte = 'o'
	streamErr byte = 'e'
)

// adminWait bounds a command forwarded through the admin socket
// (forwardAdmin): dial is the connect's limit, total the whole answer's,
// stdout and stderr streamed to the end. A server that accepts the
// connection and never answers (stuck) is then an error, not a hang.
type adminWait struct{ dial, total time.Duration }

// adminDeadline annotates the admin commands that may run longer through
// the socket than defaultAdminTotal (a backup, a check of every record): its
// value is their adminWait.total, a time.Duration string.
const adminDeadline = "admin-deadline"

// defaultAdminTotal is adminWait.total of an admin command with no
// adminDeadline: ample for a command that reads or sets a few records.
const defaultAdminTotal = 5 * time.Minute

// longAdmin is the adminDeadline of the commands whose work grows with the
// store (a backup, a listing that verifies every backup, a check or an
// evaluation of every record, a shadow report, a clock's move that folds
// every reward it closes).
const longAdmin = 6 * time.Hour

// adminDial is adminWait.dial: the socket is local, a connect that takes
// longer is a server that no longer accepts.
const adminDial = 5 * time.Second

// withDeadline annotates cmd with the adminWait.total d (adminDeadline).
func withDeadline(cmd *cobra.Command, d time.Duration) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[adminDeadline] = d.String()
	return cmd
}

// adminWaitOf is the adminWait of the admin command cmd forwarded through the
// socket: its adminDeadline, else defaultAdminTotal.
func adminWaitOf(cmd *cobra.Command) adminWait {
	w := adminWait{dial: adminDial, total: defaultAdminTotal}
	if d, err := time.ParseDuration(cmd.Annotations[adminDeadline]); err == nil {
		w.total = d
	}
	return w
}

// forwardAdmin sends the command line to the server's admin socket, copies
// the command's stdout to out and its stderr to errOut as they stream, and
// returns the remote command's outcome. A connect or an answer that takes
// longer than wait allows is an error naming the socket and what to do, and
// so is an answer cut short (the server stopped while the command ran).
func forwardAdmin(ctx context.Context, sock string, wait adminWait, args []string, out, errOut io.Writer) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, wait.total)
	defer cancel()
	err := forwardAdminCtx(ctx, sock, wait.dial, args, out, errOut)
	if err != nil && parent.Err() == nil && ctx.Err() != nil {
		return fmt.Errorf("admin socket %s: the server did not finish the command within %s: it may be stuck; "+
			"see serve's log, and restart it if it stays so (the command may still have run: check before repeating it)", sock, wait.total)
	}
	return err
}

// forwardAdminCtx is forwardAdmin within ctx, the connect within dial.
func forwardAdminCtx(ctx context.Context, sock string, dial time.Duration, args []string, out, errOut io.Writer) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: dial}
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	body, _ := json.Marshal(adminRequest{Args: args, Terminal: isTerminal(out), Streams: true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://admin/run", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("admin socket: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("admin socket: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	copyOut := func() error { _, err := io.Copy(out, resp.Body); return err }
	if resp.Header.Get(adminFramed) != "" {
		copyOut = func() error { return unframe(resp.Body, out, errOut) }
	}
	if err := copyOut(); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("admin socket %s: the server closed the connection before the command ended: it stopped "+
				"or restarted (see serve's log); the command may have run: check before repeating it: %w", sock, err)
		}
		return fmt.Errorf("admin socket: %w", err)
	}
	code, _ := strconv.Atoi(resp.Trailer.Get("X-Exit-Code"))
	if msg := resp.Trailer.Get("X-Error"); msg != "" {
		return errors.New(msg)
	}
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

// unframe copies the frames of a framed admin answer from r to out and
// errOut as they arrive.
func unframe(r io.Reader, out, errOut io.Writer) error {
	br := bufio.NewReader(r)
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		w := out
		switch hdr[0] {
		case streamOut:
		case streamErr:
			w = errOut
		default:
			return fmt.Errorf("bad frame (stream %q)", hdr[0])
		}
		if _, err := io.CopyN(w, br, int64(binary.BigEndian.Uint32(hdr[1:]))); err != nil {
			return err
		}
	}
}

// maxErrorTrailer is the longest error message an admin answer carries (in
// its X-Error trailer): the client reads trailers into a 4 KiB buffer and
// fails on a longer one. A longer message is cut (it echoes a long
// argument), ending in "…".
const maxErrorTrailer = 2048

// clipError cuts msg to maxErrorTrailer bytes, at a character's start.
func clipError(msg string) string {
	if len(msg) <= maxErrorTrailer {
		return msg
	}
	cut := maxErrorTrailer
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// serveAdmin answers admin clients on the unix socket sock (mode 0600) by
// running their command line against the live env. Only the user that runs
// serve may connect (peer credentials), and every command is written to
// the admin audit log in the data dir. It removes a stale socket left by a
// killed process first. Commands run with ctx: when it ends (serve stops),
// those still running are told to stop, so that none outlives the store.
func serveAdmin(ctx context.Context, sock string, live *env) (*http.Server, error) {
	return serveAdminAudit(ctx, sock, live, &auditLog{path: filepath.Join(live.dataDir, auditFile)})
}

// serveAdminAudit is serveAdmin writing to audit. A command whose audit
// entry cannot be written (a full disk) has run all the same: its client
// is warned on stderr and serve logs it.
func serveAdminAudit(ctx context.Context, sock string, live *env, audit *auditLog) (*http.Server, error) {
	if conn, err := net.DialTimeout("unix", sock, 200*time.Millisecond); err == nil {
		conn.Close()
		return nil, fmt.Errorf("another coupond serves %s", sock)
	}
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	ln = &peerListener{Listener: ln, self: os.Getuid(), log: live.log, audit: audit}
	srv := &http.Server{ConnContext: peerContext, ReadHeaderTimeout: 5 * time.Second, ErrorLog: server.HTTPErrorLog(live.log), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req adminRequest
		p := peerFrom(r.Context())
		err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
		root := newRoot(&app{args: req.Args, live: live, clientTerminal: req.Terminal, clientPID: p.PID})
		if err != nil || !adminLine(root, req.Args) {
			if aerr := audit.write(auditEntry{Time: time.Now().UTC(), UID: p.UID, PID: p.PID, Args: redactArgs(req.Args), Exit: -1, Error: "bad admin request", Via: viaSocket}); aerr != nil {
				live.log.Error().Err(aerr).Msg("admin audit log")
			}
			http.Error(w, "bad admin request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Trailer", "X-Exit-Code, X-Error")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		out, errOut := adminOutputs(w, req.Streams)
		w.WriteHeader(http.StatusOK)
		// The header goes now, not with the command's first output: a
		// server that stops before that output then leaves its client an
		// answer cut short (forwardAdmin says the command may have run),
		// not a bare EOF.
		w.(http.Flusher).Flush()
		root.SetArgs(req.Args)
		root.SetOut(out)
		root.SetErr(errOut)
		err = executeRecovered(r.Context(), root, live.log)
		w.Header().Set("X-Exit-Code", strconv.Itoa(ExitCode(err)))
		if err != nil {
			var ee *ExitError
			if !errors.As(err, &ee) {
				w.Header().Set("X-Error", clipError(err.Error()))
			}
		}
		entry := commandEntry(p.UID, p.PID, viaSocket, req.Args, err)
		if aerr := audit.write(entry); aerr != nil {
			live.log.Error().Err(aerr).Strs("args", commandPath(root, req.Args)).Msg("admin audit log")
			fmt.Fprintf(errOut, auditUnwritten, aerr)
		}
		live.log.Info().Strs("args", commandPath(root, req.Args)).Int("exit", entry.Exit).Int("uid", p.UID).Msg("admin command")
	})}
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	go srv.Serve(ln)
	return srv, nil
}

// adminLine reports whether the command line args names a command of
// root's admin group; flags may come before it ("--data-dir D admin ..."),
// as cobra takes them.
func adminLine(root *cobra.Command, args []string) bool {
	c, _, err := root.Find(args)
	for ; err == nil && c != nil && c.HasParent(); c = c.Parent() {
		if c.Parent() == root {
			return c.Name() == "admin"
		}
	}
	return false
}

// commandPath is the path of the command args names below root ("admin",
// "tenant", "show"), wherever the line puts its flags: what serve logs of
// an admin command, never its arguments or flag values.
func commandPath(root *cobra.Command, args []string) []string {
	c, _, err := root.Find(args)
	if err != nil {
		return []string{}
	}
	return strings.Fields(c.CommandPath())[1:]
}

// executeRecovered runs an admin command inside serve. A panic in it (a
// bug) becomes the command's error, logged with its stack, rather than a
// connection dropped mid-answer and a raw trace in the server's log.
func executeRecovered(ctx context.Context, root *cobra.Command, log zerolog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("panic", fmt.Sprint(p)).Str("stack", string(debug.Stack())).Msg("admin command panicked")
			err = fmt.Errorf("internal error in the admin command (%v); the server's log has its stack", p)
		}
	}()
	return root.ExecuteContext(ctx)
}

// adminOutputs are the stdout and stderr of an admin command answering w:
// with framed (the client reads frames, adminRequest.Streams) each as its
// own stream of frames, else stdout alone as the body and stderr dropped
// (a client of an earlier release). It sets the framed answer's header.
func adminOutputs(w http.ResponseWriter, framed bool) (out, errOut io.Writer) {
	if !framed {
		return &flushWriter{w: w, f: w.(http.Flusher)}, io.Discard
	}
	w.Header().Set(adminFramed, "1")
	mu := &sync.Mutex{}
	return &flushWriter{w: w, f: w.(http.Flusher), mu: mu, stream: streamOut},
		&flushWriter{w: w, f: w.(http.Flusher), mu: mu, stream: streamErr}
}

// flushWriter flushes after every write so progress output streams. With
// a stream, each write is one frame of it (adminFramed); the writers of one
// answer share mu.
type flushWriter struct {
	w      io.Writer
	f      http.Flusher
	mu     *sync.Mutex
	stream byte
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	if fw.stream == 0 {
		n, err := fw.w.Write(p)
		fw.f.Flush()
		return n, err
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for rest := p; len(rest) > 0; {
		chunk := rest[:min(len(rest), 1<<20)]
		var hdr [5]byte
		hdr[0] = fw.stream
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(chunk)))
		if _, err := fw.w.Write(append(hdr[:], chunk...)); err != nil {
			return len(p) - len(rest), err
		}
		rest = rest[len(chunk):]
	}
	fw.f.Flush()
	return len(p), nil
}

// printJSON writes v as indented JSON, without HTML escaping (as the API:
// a URL keeps its "&").
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printList prints a listing: with --json the value asJSON (the rows, or a
// document holding them), else a table aligned by tabwriter, the
// tab-separated header then row(r) for each row.
func printList[R any](cmd *cobra.Command, asJSON any, rows []R, header string, row func(r R) string) error {
	if jsonFlag(cmd) {
		return printJSON(cmd.OutOrStdout(), asJSON)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, row(r))
	}
	return tw.Flush()
}

// leafCmd is a command with no positional arguments that runs run.
func leafCmd(use, short string, run func(cmd *cobra.Command) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return run(cmd) },
	}
}

// internalCmd is a hidden leafCmd: a child process that bench starts, not
// an operator command.
func internalCmd(use, short string, run func(cmd *cobra.Command) error) *cobra.Command {
	cmd := leafCmd(use, short, run)
	cmd.Hidden = true
	return cmd
}
