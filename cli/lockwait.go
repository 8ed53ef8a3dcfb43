package cli

// serve and the data dir's lock held by another process. An admin command
// run without a server, or a restore, holds the lock (privacy.LockDataDir)
// for as long as it runs; serve started meanwhile (systemd's restart after
// a crash, an operator's start) used to exit 1 at once, and under systemd
// (Restart=on-failure, RestartSec=2, at most 5 starts in 10 s) that loop
// left the service failed once the restore ended. serve now waits for
// such a holder, logging who it is, unbounded: a restore of a large store
// takes what it takes, and serve ends the wait at SIGTERM. Another serve
// holding it is a mistake to report, not to wait out: serve exits 1 at
// once, naming its pid. Who holds the lock is read from the lock itself
// (the pid that fcntl reports) and that process's command line
// (lockHolderOf, Linux); where it cannot be told, serve waits, saying so.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/privacy"
)

// lockPoll is how often serve tries the data dir's lock while another
// process holds it.
const lockPoll = time.Second

// lockLogEvery is how often serve logs, while it waits for the data dir's
// lock, that it still waits and for whom.
const lockLogEvery = time.Minute

// lockHolder is the process that holds a data dir's lock, as far as it
// can be told: pid 0 when the lock does not say (or not on Linux).
type lockHolder struct {
	pid     int
	command string // "coupond serve", "coupond admin restore", ...; "" unknown
	serve   bool   // the holder is a coupond serve
}

// describe is how serve's log and errors name h.
func (h lockHolder) describe() string {
	switch {
	case h.pid == 0:
		return "another process (which one, its lock does not say)"
	case h.command == "":
		return fmt.Sprintf("process %d", h.pid)
	}
	return fmt.Sprintf("process %d (%s)", h.pid, h.command)
}

// waitForLock takes the data dir's lock for serve and prepares the data
// dir (prepareDataDir), as lockWhenSpace does; a dir that is no coupond
// data dir is refused first, before the lock file is created in it
// (checkDataDir). While another process holds the lock it waits, trying
// every lockPoll, and logs who holds it at once and then every
// lockLogEvery, until the lock is free or ctx ends (ctx's error). A
// holder that is another serve is an error at once.
func waitForLock(ctx context.Context, dataDir string, log zerolog.Logger) (io.Closer, error) {
	if err := checkDataDir(dataDir); err != nil {
		return nil, err
	}
	var since, logged time.Time
	for {
		lock, err := privacy.LockDataDir(dataDir)
		if err == nil {
			if err := prepareDataDir(dataDir); err != nil {
				lock.Close()
				return nil, err
			}
			if !since.IsZero() {
				log.Info().Dur("waited", time.Since(since)).Msg("data dir free again: opening the store")
			}
			return lock, nil
		}
		if !errors.Is(err, privacy.ErrDataDirInUse) {
			return nil, orAccessError(dataDir, err)
		}
		h := lockHolderOf(filepath.Join(dataDir, privacy.DataDirLockFile), err)
		if h.serve {
			return nil, fmt.Errorf("data dir %s is in use by another coupond serve, %s: two servers cannot share a data dir; "+
				"stop that one, or give this one its own --data-dir", dataDir, h.describe())
		}
		now := time.Now()
		if since.IsZero() {
			since = now
		}
		if now.Sub(logged) >= lockLogEvery {
			log.Warn().Str("data_dir", dataDir).Int("holder_pid", h.pid).Str("holder", h.command).Time("waiting_since", since).
				Msg("data dir in use by " + h.describe() + ", an admin command or a restore: the store opens once it ends; waiting (logged again every minute)")
			logged = now
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// commandOf names the coupond command of the command line argv (as
// /proc/PID/cmdline has it): "coupond serve", or "coupond admin" and at
// most two words of the admin command ("coupond admin restore"), never a
// flag or its value; serve reports whether it is serve. A command line of
// no coupond command is named by its program alone.
func commandOf(argv []string) (command string, serve bool) {
	if len(argv) == 0 {
		return "", false
	}
	for i, a := range argv[1:] {
		switch a {
		case "serve":
			return "coupond serve", true
		case "admin":
			words := []string{"coupond", "admin"}
			for _, w := range argv[i+2:] {
				if strings.HasPrefix(w, "-") || len(words) == 4 {
					break
				}
				words = append(words, w)
			}
			return strings.Join(words, " "), false
		}
	}
	return filepath.Base(argv[0]), false
}
