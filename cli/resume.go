package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/store"
)

// In-place restart after a write failed for want of space (contract §8:
// "when space comes back it resumes by itself, with no restart").
//
// A write that meets a full disk inside Pebble fails the store for good
// (store.ErrFailed): Pebble's log writer keeps the error, or one of its
// goroutines is parked holding its mutex (store/park.go), and the open
// Pebble DB can be neither mended, nor closed, nor abandoned for a new one
// in the same process (its goroutines may still write files, and the
// process holds its lock). A restart is safe (every acknowledged write was
// synced, as the crash tests prove), so once the disk has room again
// serve restarts itself: it stops as a shutdown does, within a short bound
// and without closing the store, and execs its own binary with its own
// arguments and environment: the same pid, for systemd and for whoever
// watches it. The API's listening socket goes to the new image (listenFD),
// so the port never closes; connections made meanwhile wait in its backlog.
// The new image also learns why it was started (resumedEnv), so that a
// batch job the full disk stopped waits for space rather than ending as
// one a restart interrupted (batch.RunnerConfig.ResumedAfterFullDisk).
// A store failed for want of file descriptors (EMFILE, ENFILE) restarts
// the same way once serve can open files again (canOpenFiles): closing
// descriptors heals it, and the exec closes the old image's own. A store
// failed by another I/O error (EIO, EACCES, a read-only disk) still needs
// the operator's restart, as /readyz and the log say.

// listenFDEnv names, for the image serve execs, the API listener's file
// descriptor and the --addr it was opened for: "FD@ADDR".
const listenFDEnv = "COUPOND_LISTEN_FD"

// resumedEnv tells the image serve execs why it was started: a restart in
// place after a write failed for want of space (resumedNoSpace) or of file
// descriptors (resumedNoFiles).
const (
	resumedEnv     = "COUPOND_RESUMED"
	resumedNoSpace = "sin_espacio"
	resumedNoFiles = "sin_descriptores"
)

// resumeMargin is the free space an in-place restart waits for beyond what
// reopening the store writes out (resumeNeed): a new MANIFEST, OPTIONS
// and the tables' overhead.
const resumeMargin = 4 << 20

// resumeCheck is how often serve looks whether it should restart in place.
const resumeCheck = time.Second

// resumeStopBound bounds each step of the shutdown before an in-place
// restart: a request or a loop may wait on the failed store forever.
const resumeStopBound = 2 * time.Second

// resumeWatch decides when serve restarts in place (due).
type resumeWatch struct {
	db      *store.DB
	dataDir string
	reserve uint64
	log     zerolog.Logger
	// below: the last reading noted (noteReserve) was below the reserve.
	below bool
	// failed: a reading noted the store failed (logged once).
	failed bool
	// inodes reads the free inodes of a directory's file system (nil:
	// freeInodes); counted is false where it counts none.
	inodes func(dir string) (free uint64, counted bool)
	// files reports whether serve can open files in a directory again
	// (nil: canOpenFiles).
	files func(dir string) bool
	// reason is why due last answered true: resumedNoSpace or
	// resumedNoFiles (resumedEnv).
	reason string
}

// due reports whether serve should restart in place now: the store
// failed, it can restart itself (store.SpaceStatus.Resumes), and what
// failed it is back: for want of space, the data dir's disk has the
// reserve free again, and at least what reopening the store needs
// (resumeNeed); for want of file descriptors, serve can open files again
// (canOpenFiles). When its binary cannot be executed (replaced by an
// upgrade, removed) it logs why once, turns Resumes off, so /readyz says a
// restart is needed, and answers false from then on.
func (w *resumeWatch) due() bool {
	sp := w.db.Space()
	w.noteReserve(sp)
	if !sp.Failed || !sp.Resumes {
		return false
	}
	var back *zerolog.Event
	switch {
	case sp.NoSpace:
		avail, ok := w.room()
		if !ok {
			return false
		}
		w.reason, back = resumedNoSpace, w.log.Warn().Uint64("available_bytes", avail).Str("after", "a write failed for want of space")
	case sp.NoFiles:
		files := w.files
		if files == nil {
			files = canOpenFiles
		}
		if !files(w.dataDir) {
			return false
		}
		w.reason, back = resumedNoFiles, w.log.Warn().Int("files_opened", resumeFiles).Str("after", "a write failed for want of file descriptors")
	default:
		return false
	}
	if _, err := selfExecutable(); err != nil {
		w.db.SetResumes(false)
		w.log.Error().Err(err).Msg("what failed the store is back, but serve cannot restart itself in place: writes stay refused until coupond is restarted")
		return false
	}
	back.Msg("what failed the store is back: restarting in place (same process, the port stays open) to resume writes")
	return true
}

// resumeFiles is how many files canOpenFiles opens at once: reopening the
// store opens its directory, lock, logs, MANIFEST and the tables its first
// reads need.
const resumeFiles = 64

// canOpenFiles reports whether resumeFiles descriptors can be opened (on
// dir) at once, and closes them: a store failed for want of descriptors
// (EMFILE, ENFILE) can be reopened. The failed image's own descriptors
// count against its limit here, and the exec closes them: the new image
// has at least that room.
func canOpenFiles(dir string) bool {
	var open []*os.File
	defer func() {
		for _, f := range open {
			f.Close()
		}
	}()
	for range resumeFiles {
		f, err := os.Open(dir)
		if err != nil {
			return false
		}
		open = append(open, f)
	}
	return true
}

// resumeInodes is the number of free inodes an in-place restart waits
// for: reopening the store makes a new write-ahead log, MANIFEST, OPTIONS
// and the tables its logs' replay writes out.
const resumeInodes = 64

// room reports whether the data dir's disk has room to reopen the store:
// the reserve free and at least what reopening needs (resumeNeed), and
// free inodes (resumeInodes) where the file system counts them: ENOSPC is
// also a disk out of inodes with bytes free, where a restart's open fails
// (exit 1) and systemd's restarts then closed the port every 2 s. avail is
// the free bytes.
func (w *resumeWatch) room() (avail uint64, ok bool) {
	u, err := store.DiskUsage(nil, w.dataDir)
	if err != nil || u.AvailBytes < max(w.reserve, resumeNeed(filepath.Join(w.dataDir, "db"))) {
		return 0, false
	}
	inodes := w.inodes
	if inodes == nil {
		inodes = freeInodes
	}
	if free, counted := inodes(w.dataDir); counted && free < resumeInodes {
		return 0, false
	}
	return u.AvailBytes, true
}

// noteReserve logs when the free space crosses the reserve, once each
// way: below it writes answer 503 almacenamiento_lleno, and only these
// lines say why in the log. A failed store (sp.Failed, which also reports
// Low) is logged once, as an error, and no more crossings: writes do not
// resume with the space, but with the restart. The write that failed it may
// have been an admin command's or a background loop's, which left no line
// that said so (the API's refusals are each a warning).
func (w *resumeWatch) noteReserve(sp store.SpaceStatus) {
	if sp.Failed && !w.failed {
		w.failed = true
		ev := w.log.Error().Bool("no_space", sp.NoSpace)
		switch {
		case sp.RestartNeeded():
			ev.Msg("a write failed inside the store: every write is refused (503 almacenamiento_lleno) until coupond is restarted")
		case sp.NoFiles:
			ev.Msg("a write failed inside the store for want of file descriptors: every write is refused (503 almacenamiento_lleno); " +
				"serve restarts itself in place once it can open files again: raise its limit (LimitNOFILE) or end what holds them")
		default:
			ev.Msg("a write failed inside the store for want of space: every write is refused (503 almacenamiento_lleno); " +
				"serve restarts itself in place once the disk has the reserve free again: free space")
		}
	}
	if sp.Failed || sp.Low == w.below {
		return
	}
	w.below = sp.Low
	if sp.Low {
		w.log.Warn().Uint64("available_bytes", sp.Avail).Uint64("reserve_bytes", sp.Reserve).
			Msg("disk below the reserve: writes answer 503 almacenamiento_lleno until space comes back; reads, exports, deletions and admin commands go on")
		return
	}
	w.log.Info().Uint64("available_bytes", sp.Avail).Uint64("reserve_bytes", sp.Reserve).Msg("disk above the reserve again: writes resume")
}

// resumeNeed is the free space reopening the store in dbDir needs:
// replaying its write-ahead logs writes their content out as tables and a
// new MANIFEST, so the logs' and MANIFESTs' sizes (their length; the
// store preallocates no log, and logs an earlier release preallocated
// hold more, which the reopen reuses or frees), plus resumeMargin. Not a
// flat bound such as 64 MiB: on a small disk such logs could keep the
// free space below it for good.
func resumeNeed(dbDir string) uint64 {
	need := uint64(resumeMargin)
	ents, _ := os.ReadDir(dbDir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") && !strings.HasPrefix(e.Name(), "MANIFEST-") {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			need += uint64(info.Size())
		}
	}
	return need
}

// runnableAs returns exe, the path the running binary was started from,
// when it can be executed again as the same binary: an executable
// regular file that is still the one running (the file running names,
// /proc/self/exe on Linux). Else it says why: removed, not executable,
// or replaced by another file (an upgrade) since serve started, whose
// image serve must not run as its own.
func runnableAs(exe, running string) (string, error) {
	info, err := os.Stat(exe)
	if err != nil {
		return "", fmt.Errorf("the binary %s was removed since serve started: %w", exe, err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", exe)
	}
	self, err := os.Stat(running)
	if err != nil {
		return "", err
	}
	if !os.SameFile(info, self) {
		return "", fmt.Errorf("the binary %s was replaced since serve started", exe)
	}
	return exe, nil
}

// resumeInPlace is what serve returns when it stopped to restart in place:
// the API listener's descriptor, to pass on (serveResuming).
type resumeInPlace struct {
	listener *os.File // not closed on exec
	addr     string   // --addr
	reason   string   // resumedEnv's value: why
}

func (r *resumeInPlace) Error() string { return "serve stopped to restart in place" }

// serveResuming runs serve and, when it stopped to restart in place, execs
// the binary again, unless ctx ended meanwhile (resumeInPlace.exec). It
// returns only if it did not exec: nil for a stop, else an error that
// says the exec failed, and the process ends with it (a supervisor starts
// it again).
func serveResuming(ctx context.Context, dataDir string, f serveFlags, logOut io.Writer) error {
	err := serve(ctx, dataDir, f, logOut)
	var r *resumeInPlace
	if !errors.As(err, &r) {
		return err
	}
	err = r.exec(ctx, execSelf)
	format := f.logFormat
	if f.jsonLogs {
		format = "json"
	}
	log, lerr := newLogger(f.logLevel, format, logOut)
	if lerr != nil {
		log = zerolog.Nop()
	}
	if err == nil {
		log.Info().Msg("stopped: asked to stop while it stopped to restart in place")
		return nil
	}
	log.Error().Err(err).Msg("restart in place failed: coupond stops; start it again")
	return fmt.Errorf("restart in place: %w", err)
}

// exec runs execSelf with r's listener, unless ctx ended: a stop signal
// that came while serve stopped to restart in place then wins, as it
// would have without the restart (the new image would never learn of
// it, and its supervisor would wait, then kill it). It closes the
// listener and returns nil then; else what execSelf returns, on failure.
func (r *resumeInPlace) exec(ctx context.Context, execSelf func(listener *os.File, addr, reason string) error) error {
	if ctx.Err() != nil {
		r.listener.Close()
		return nil
	}
	return execSelf(r.listener, r.addr, r.reason)
}

// execEnv is the environment of the image serve execs: its own, with
// listenFDEnv naming fd, the API listener opened for addr, and resumedEnv
// saying why it restarts (reason: resumedNoSpace, resumedNoFiles).
func execEnv(fd uintptr, addr, reason string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, listenFDEnv+"=") && !strings.HasPrefix(kv, resumedEnv+"=") {
			env = append(env, kv)
		}
	}
	return append(env, fmt.Sprintf("%s=%d@%s", listenFDEnv, fd, addr), resumedEnv+"="+reason)
}

// resumedAfterFullDisk reports whether this image was started by a
// restart in place after a write failed for want of space or of file
// descriptors (resumedEnv): batch jobs the failed store stopped run again
// rather than end as jobs a restart interrupted. It reads the variable
// once and removes it from the environment, so a later exec or child does
// not inherit it; another value is logged and ignored.
func resumedAfterFullDisk(log zerolog.Logger) bool {
	v, ok := os.LookupEnv(resumedEnv)
	if !ok {
		return false
	}
	os.Unsetenv(resumedEnv)
	if v != resumedNoSpace && v != resumedNoFiles {
		log.Warn().Str(resumedEnv, v).Msg("ignored: not a reason serve restarts in place for")
		return false
	}
	log.Info().Str(resumedEnv, v).Msg("restarted in place after a write failed inside the store: batch jobs it stopped wait for space and run again")
	return true
}

// inheritedListener returns the API listener an in-place restart passed
// on (listenFDEnv), when it was opened for addr; nil when there is none.
// It reads the variable once and removes it from the environment; a
// descriptor it does not use is closed, so the port is free for
// net.Listen.
func inheritedListener(addr string, log zerolog.Logger) net.Listener {
	v, ok := os.LookupEnv(listenFDEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(listenFDEnv)
	fdText, lnAddr, _ := strings.Cut(v, "@")
	fd, err := strconv.Atoi(fdText)
	if err != nil || fd < 3 || !isSocket(fd) {
		log.Warn().Str(listenFDEnv, v).Msg("ignored: not the descriptor of a socket")
		return nil
	}
	file := os.NewFile(uintptr(fd), "api-listener")
	defer file.Close()
	if lnAddr != addr {
		log.Warn().Str("inherited_addr", lnAddr).Str("addr", addr).Msg("inherited API listener closed: --addr changed")
		return nil
	}
	ln, err := net.FileListener(file)
	if err != nil {
		log.Warn().Err(err).Msg("inherited API listener unusable: listening afresh")
		return nil
	}
	return ln
}

// dupListener returns a listener on a duplicate of ln's socket: closing
// it leaves ln open.
func dupListener(ln net.Listener) (net.Listener, error) {
	file, err := listenerFile(ln)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return net.FileListener(file)
}

// listenerFile returns a duplicate of ln's descriptor (close-on-exec);
// the caller closes it. Do not call its Fd: that puts the socket, shared
// with ln, in blocking mode, and ln's Accept could then block its Close.
func listenerFile(ln net.Listener) (*os.File, error) {
	fl, ok := ln.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, fmt.Errorf("listener %T has no descriptor", ln)
	}
	return fl.File()
}

// running is what serve runs once the store is open: stop ends it.
type running struct {
	http        *http.Server
	admin       *http.Server
	stopConsole func(context.Context) error // an error: requests still running
	stopLoops   func()
}

// stop shuts the API, the admin socket and the console down, each within
// bound, then stops the background loops, waiting for them at most bound
// when boundLoops (a loop can wait on a failed store forever) and as long
// as they take otherwise. The API's answers still going at bound (a
// customer's export streamed to a slow client, which holds a snapshot of
// the store) have their connections closed: they end at their next write,
// before the store is closed.
//
// adminLeft reports admin commands (through the socket or the console)
// or console pages still running at bound (an "admin check" or "admin
// backup" reading the whole store, which the end of serve's context does
// not stop): they go on reading and writing the store, so the caller must
// not close it under them (Pebble's Close then panics on their open
// iterators, and their next reads dereference what it freed).
func (r *running) stop(bound time.Duration, boundLoops bool, log zerolog.Logger) (adminLeft bool) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := r.http.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("http shutdown: answers still going are cut short")
		r.http.Close()
	}
	adminLeft = r.admin.Shutdown(ctx) != nil
	if r.stopConsole(ctx) != nil {
		adminLeft = true
	}
	if !boundLoops {
		r.stopLoops()
		return adminLeft
	}
	done := make(chan struct{})
	go func() { r.stopLoops(); close(done) }()
	select {
	case <-done:
	case <-time.After(bound):
		log.Warn().Msg("background loops still waiting on the failed store: left behind")
	}
	return adminLeft
}
