package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/coupond/coupond/atomicfile"

	"github.com/coupond/coupond/store"
)

// auditFile is the admin audit log inside the data dir: one JSON line per
// admin command run against the data dir, through serve's admin socket
// (and per connection refused there) or with serve stopped (app.withEnv,
// admin restore: the command opened the data dir itself). Not audited:
// what never opens the data dir (admin audit reading this log, version,
// help, docs, lab, bench, webhook; admin debug pprof, which serve audits
// when it takes the profile), and a command refused before the data dir
// opened (a bad flag, tenant delete's --confirm, a data dir that is
// missing, holds no coupond data, or does not open: locked by another
// process, damaged), which changed nothing there.
const auditFile = "admin-audit.log"

// The ways an admin command reached the data dir (auditEntry.Via).
const (
	viaSocket = "socket" // through serve's admin socket
	viaDirect = "direct" // serve stopped: the command opened the data dir itself
)

// peer is who is at the other end of an admin socket connection.
type peer struct {
	UID, PID int
	Known    bool // false where the platform cannot tell (see peerOf)
}

// allowPeer reports whether p may run admin commands in a server run by
// uid self: only the same user may (contract section 8).
func allowPeer(p peer, self int) error {
	if p.Known && p.UID != self {
		return fmt.Errorf("admin socket: peer uid %d is not the uid %d that runs serve", p.UID, self)
	}
	return nil
}

// auditEntry is one line of the admin audit log.
type auditEntry struct {
	Time  time.Time `json:"time"`
	UID   int       `json:"uid"`
	PID   int       `json:"pid"`
	Args  []string  `json:"args"`
	Exit  int       `json:"exit"`
	Error string    `json:"error,omitempty"`
	// Via is how the command reached the data dir: viaSocket or viaDirect;
	// "" in the lines of earlier releases, which wrote those of the
	// socket, and of tenant delete run with serve stopped.
	Via string `json:"via,omitempty"`
}

// commandEntry is the audit line of the admin command args (secret-looking
// flag values redacted) run by uid's process pid, via viaSocket or
// viaDirect, with err its outcome.
func commandEntry(uid, pid int, via string, args []string, err error) auditEntry {
	entry := auditEntry{Time: time.Now().UTC(), UID: uid, PID: pid, Args: redactArgs(args), Exit: ExitCode(err), Via: via}
	if err != nil {
		entry.Error = err.Error()
	}
	return entry
}

// auditLog appends entries to the data dir's audit log, each synced.
//
// An entry is written after its command ran (its exit is part of it), so
// a log that cannot be written (a full disk) refuses nothing: admin
// commands keep working below the disk reserve (contract §8), deletions
// among them. The lines that could not be written are kept in memory, at
// most maxAuditPending bytes, and written before the next entry, so a
// disk that fills and empties again while serve runs loses none; write's
// error says whether the entry was kept or lost. (A write cut short
// mid-way may leave whole lines of it on disk, then written again: a line
// twice rather than none.)
type auditLog struct {
	mu   sync.Mutex
	path string
	fs   atomicfile.FS // nil: the operating system's
	// once is set for the log of a process that writes one entry and ends
	// (a command run with serve stopped): an entry not written is lost,
	// not kept for a next one.
	once    bool
	pending []byte // lines not written yet, oldest first
}

// maxAuditPending bounds the lines an audit log keeps while it cannot be
// written.
const maxAuditPending = 1 << 20

// auditUnwritten is the warning (a format of the write's error) an admin
// command prints when its audit line could not be written. It says nothing
// of the command's own outcome, which its exit code and output give: "the
// command ran" read as a success after a command that failed.
const auditUnwritten = "warning: this command's line in the admin audit log was not written: %v\n"

func (l *auditLog) write(e auditEntry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fsys := l.fs
	if fsys == nil {
		fsys = atomicfile.OS{}
	}
	data := append(append(l.pending[:len(l.pending):len(l.pending)], line...), '\n')
	if err := atomicfile.AppendFS(fsys, l.path, store.FileMode, data); err != nil {
		if l.once {
			return fmt.Errorf("admin audit log: %w; this entry is lost", err)
		}
		if len(data) > maxAuditPending {
			return fmt.Errorf("admin audit log: %w; this entry is lost (%d bytes of earlier entries wait to be written)", err, len(l.pending))
		}
		l.pending = data
		return fmt.Errorf("admin audit log: %w; the entry is kept in memory and written with the next one", err)
	}
	l.pending = nil
	return nil
}

// redactArgs returns args with the values of flags that look like secrets
// replaced by "***" (--secret X, --secret=X; names holding secret, token,
// password or key), and so the value of --customer: a raw cliente_ref,
// which no customer deletion reaches in this log.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	redactNext := false
	for i, a := range args {
		if redactNext {
			out[i], redactNext = "***", false
			continue
		}
		out[i] = a
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !(secretFlag(name) || name == "customer") {
			continue
		}
		if hasValue {
			out[i] = a[:strings.Index(a, "=")+1] + "***"
		} else {
			redactNext = true
		}
	}
	return out
}

func secretFlag(name string) bool {
	name = strings.ToLower(name)
	for _, s := range []string{"secret", "token", "password", "passwd", "key"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// peerListener accepts on the admin socket only connections from the user
// that runs serve; every other is closed at once, logged and audited.
type peerListener struct {
	net.Listener
	self  int
	log   zerolog.Logger
	audit *auditLog
}

// peerConn is an accepted admin connection and who made it.
type peerConn struct {
	net.Conn
	peer peer
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := peerOf(c)
		if err == nil {
			err = allowPeer(p, l.self)
		}
		if err == nil {
			return &peerConn{Conn: c, peer: p}, nil
		}
		// Audit before closing: the refusal is on record by the time the
		// peer learns of it.
		l.log.Warn().Err(err).Int("uid", p.UID).Int("pid", p.PID).Msg("admin socket: connection refused")
		if aerr := l.audit.write(auditEntry{Time: time.Now().UTC(), UID: p.UID, PID: p.PID, Args: []string{}, Exit: -1, Error: err.Error(), Via: viaSocket}); aerr != nil {
			l.log.Error().Err(aerr).Msg("admin audit log")
		}
		c.Close()
	}
}

type peerKey struct{}

// peerContext puts the peer of an admin connection into its requests'
// context (http.Server.ConnContext).
func peerContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.peer)
	}
	return ctx
}

func peerFrom(ctx context.Context) peer {
	p, ok := ctx.Value(peerKey{}).(peer)
	if !ok {
		return peer{UID: -1, PID: -1}
	}
	return p
}

// auditCmd is "admin audit": the admin commands run against the data dir
// (auditFile), the latest --last of them (the log is kept for good). It
// reads the log alone and is not audited itself.
func auditCmd(a *app) *cobra.Command {
	var last int
	cmd := leafCmd("audit", "Show the admin audit log: every admin command run on the data dir, through the server's socket or with it stopped (time, uid, pid, how, arguments, outcome)", func(cmd *cobra.Command) error {
		if last < 1 {
			return fmt.Errorf("--last: want at least 1, got %d", last)
		}
		if err := dataDirExists(a.dataDir); err != nil {
			return err
		}
		entries, skipped, err := readAudit(filepath.Join(a.dataDir, auditFile))
		if err != nil {
			return err
		}
		if skipped > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "admin audit log: %s that cannot be read (torn by a crash, or damaged) not shown\n", plural(skipped, "line"))
		}
		if n := len(entries); n > last {
			entries = entries[n-last:]
			fmt.Fprintf(cmd.ErrOrStderr(), "admin audit log: the latest %d of %d entries shown (--last)\n", last, n)
		}
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), entries)
		}
		w := cmd.OutOrStdout()
		if len(entries) == 0 {
			fmt.Fprintln(w, "no admin commands run on this data dir yet")
		}
		for _, e := range entries {
			fmt.Fprintln(w, auditLine(e))
		}
		return nil
	})
	cmd.Flags().IntVar(&last, "last", 1000, "at most this many entries (the latest)")
	return cmd
}

// auditLine is the text of e that admin audit prints: time, uid, pid,
// how it ran ("via socket", "via direct"; nothing for a line of an
// earlier release, which has no Via), arguments and outcome.
func auditLine(e auditEntry) string {
	outcome := fmt.Sprintf("exit %d", e.Exit)
	if e.Exit < 0 {
		outcome = "refused"
	}
	if e.Error != "" {
		outcome += ": " + e.Error
	}
	via := ""
	if e.Via != "" {
		via = "via " + e.Via + "  "
	}
	return fmt.Sprintf("%s  uid %d  pid %d  %s%s  (%s)", e.Time.Format(time.RFC3339), e.UID, e.PID, via, strings.Join(e.Args, " "), outcome)
}

// readAudit reads the audit log; a missing one is empty. Lines that do not
// parse (a line torn by a crash mid-write, or damaged) are skipped and
// counted.
func readAudit(path string) (entries []auditEntry, skipped int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return []auditEntry{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("admin audit log: %w", err)
	}
	defer f.Close()
	entries = []auditEntry{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e auditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			skipped++
			continue
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("admin audit log: %w", err)
	}
	return entries, skipped, nil
}
