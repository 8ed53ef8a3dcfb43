package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// parseSize reads a --disk-reserve value: "" or "auto" (the contract's
// default, auto true), or a byte count with an optional unit: B, KiB, MiB,
// GiB, TiB (powers of 1024), KB, MB, GB, TB (powers of 1000), K/M/G/T as
// the binary units; "0" disables the reserve.
func parseSize(s string) (bytes uint64, auto bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "auto") {
		return 0, true, nil
	}
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	mult := map[string]float64{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30,
		"t": 1 << 40, "tib": 1 << 40, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}[unit]
	v, perr := strconv.ParseFloat(num, 64)
	if num == "" || perr != nil || mult == 0 || v < 0 || v*mult > 1<<62 {
		return 0, false, fmt.Errorf("--disk-reserve: want a size such as 512MiB, 2GiB or 0, got %q", s)
	}
	return uint64(v * mult), false, nil
}

// diskReserve resolves the reserve for the file system holding dir: the
// flag's value, or the larger of 1 GiB and 5 % of the disk.
func diskReserve(spec, dir string) (reserve, avail uint64, known bool, err error) {
	n, auto, err := parseSize(spec)
	if err != nil {
		return 0, 0, false, err
	}
	u, uerr := store.DiskUsage(nil, dir)
	if uerr != nil {
		if auto {
			n = 1 << 30
		}
		return n, 0, false, nil
	}
	if auto {
		n = store.DefaultReserve(u.TotalBytes)
	}
	return n, u.AvailBytes, true, nil
}

// smallReserve is the least reserve that covers what the store writes
// without asking: a memtable flush writes up to 64 MB of tables and a
// compaction its output before it frees its inputs, and a flush or
// compaction that finds the disk full stops the store until a restart.
const smallReserve = 128 << 20

// logReserve logs the disk reserve, with a warning when it is set (not 0)
// below smallReserve.
func logReserve(log zerolog.Logger, reserve uint64) {
	log.Info().Uint64("disk_reserve_bytes", reserve).Msg("disk reserve")
	if reserve > 0 && reserve < smallReserve {
		log.Warn().Uint64("disk_reserve_bytes", reserve).Uint64("advised_bytes", smallReserve).
			Msg("disk reserve under 128 MiB: a memtable flush writes up to 64 MB, so a disk filling up can stop the store before writes answer 503 almacenamiento_lleno; raise --disk-reserve")
	}
}

// spacePoll is how often serve re-reads the free space while it waits for
// it at start.
const spacePoll = time.Second

// waitForSpace runs before the store is opened: Pebble writes as it opens
// (WAL replay, a new MANIFEST), and on a full disk it would fail or leave
// empty files behind at every attempt. Below the reserve it logs why,
// answers /healthz (200) and everything else (503) on addr meanwhile, with
// the API's connection limits (cfg: timeouts, --max-conns), and
// polls until space comes back or ctx ends. It returns the reserve. ln,
// when not nil, is the API's listener passed on by a restart in place:
// the waiting server answers on a duplicate of it, and ln stays open.
//
// When it waited, it also returns the data dir's lock (privacy.LockDataDir),
// prepared (prepareDataDir), for openEnvLocked: while serve waits it has no
// admin socket, so an admin command (or a restore) opens the data dir
// itself, and space coming back during it must not stop serve as "in use".
// It then waits on, saying so, until the lock is free. lock is nil when
// the disk had the reserve free at once: openEnv takes it, and a data dir
// in use (another serve) is an error as before.
func waitForSpace(ctx context.Context, dataDir, spec, addr string, ln net.Listener, cfg server.HTTPConfig, log zerolog.Logger) (reserve uint64, lock io.Closer, err error) {
	// Refused first, as waitForLock does: the lock file lockWhenSpace
	// creates would make a mistyped directory look like a data dir.
	if err := checkDataDir(dataDir); err != nil {
		return 0, nil, err
	}
	reserve, avail, known, err := diskReserve(spec, dataDir)
	if err != nil || !known || avail >= reserve {
		return reserve, nil, err
	}
	log.Error().Uint64("available_bytes", avail).Uint64("reserve_bytes", reserve).Str("data_dir", dataDir).
		Msg("disk below the reserve: the store stays closed until space comes back (free space or lower --disk-reserve)")
	var inUse atomic.Bool
	srv, err := waitingServer(addr, ln, dataDir, reserve, inUse.Load, cfg, log)
	if err != nil {
		log.Warn().Err(err).Msg("cannot answer /healthz while waiting for space")
	}
	defer func() {
		if srv != nil {
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(shut)
		}
	}()
	t := time.NewTicker(spacePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-t.C:
		}
		if u, err := store.DiskUsage(nil, dataDir); err == nil && u.AvailBytes >= reserve {
			lock, err := lockWhenSpace(dataDir, u.AvailBytes, &inUse, log)
			if lock != nil || err != nil {
				return reserve, lock, err
			}
		}
	}
}

// lockWhenSpace locks and then prepares (prepareDataDir) dataDir once the
// disk has space again (avail bytes free). While another process holds the
// lock (an admin command, a restore) it returns neither lock nor error,
// logging that once and setting inUse (what /readyz says); any other
// failure is an error.
func lockWhenSpace(dataDir string, avail uint64, inUse *atomic.Bool, log zerolog.Logger) (io.Closer, error) {
	lock, err := privacy.LockDataDir(dataDir)
	if err == nil {
		if err := prepareDataDir(dataDir); err != nil {
			lock.Close()
			return nil, err
		}
		log.Info().Uint64("available_bytes", avail).Msg("disk space is back: opening the store")
		return lock, nil
	}
	if !errors.Is(err, privacy.ErrDataDirInUse) {
		return nil, orAccessError(dataDir, err)
	}
	if !inUse.Swap(true) {
		log.Warn().Uint64("available_bytes", avail).
			Msg("disk space is back, but the data dir is in use by another coupond (an admin command or a restore): the store opens once it ends")
	}
	return nil, nil
}

// waitingServer serves waitingHandler on addr, or on a duplicate of
// inherited when it is not nil, while serve waits for space, with the
// limits of cfg (server.HTTPServerFor): the API's timeouts, header cap and
// cap on open connections hold while the disk is full too.
func waitingServer(addr string, inherited net.Listener, dataDir string, reserve uint64, inUse func() bool, cfg server.HTTPConfig, log zerolog.Logger) (*http.Server, error) {
	var ln net.Listener
	var err error
	if inherited != nil {
		ln, err = dupListener(inherited)
	} else {
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	avail := func() uint64 {
		u, err := store.DiskUsage(nil, dataDir)
		if err != nil {
			return 0
		}
		return u.AvailBytes
	}
	srv, limited := server.HTTPServerFor(waitingHandler(avail, reserve, inUse), ln, cfg, log)
	go func() {
		if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			limited.Close()
		}
	}()
	return srv, nil
}

// waitingHandler answers while serve waits for space: /healthz 200,
// /metrics the disk series (writes refused: the disk alerts fire),
// /readyz and every other path 503 almacenamiento_lleno, whose motivo says
// why the store is closed: too little space, or (inUse) space back and
// the data dir in use by another coupond.
func waitingHandler(avail func() uint64, reserve uint64, inUse func() bool) http.Handler {
	metrics := server.DiskSpaceMetrics(func() store.SpaceStatus {
		return store.SpaceStatus{Reserve: reserve, Avail: avail(), Known: true, Low: true}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			metrics.ServeHTTP(w, r)
			return
		}
		var id [8]byte
		rand.Read(id[:])
		trace := hex.EncodeToString(id[:])
		motivo := fmt.Sprintf("espacio libre %d MiB por debajo de la reserva de %d MiB: el almacén sigue cerrado hasta que haya espacio", avail()>>20, reserve>>20)
		if inUse() {
			motivo = "hay espacio de nuevo, pero el directorio de datos está en uso por otro proceso de coupond (un comando admin o una restauración): el almacén se abre cuando termine"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Trace-Id", trace)
		w.Header().Set("X-Content-Type-Options", "nosniff") // as every API answer
		switch r.URL.Path {
		case "/healthz":
			w.WriteHeader(http.StatusOK)
			fmt.Fprintln(w, `{"estado":"ok"}`)
		case "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "{\"estado\":\"almacenamiento_lleno\",\"motivo\":%q}\n", motivo)
		default:
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "{\"codigo\":\"almacenamiento_lleno\",\"mensaje\":%q,\"campo\":null,\"detalle\":null,\"trace_id\":%q}\n", motivo, trace)
		}
	})
}
