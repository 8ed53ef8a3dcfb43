package privacy

// Backups and how deletion reaches them (contract section 7):
//
//   - "admin backup --out DIR" (Backups.Take) first registers DIR in
//     <data-dir>/backups.json and creates DIR/deletions.jsonl (the deletion
//     ledger), then takes a Pebble checkpoint into DIR/db, copies keys.json
//     and writes DIR/manifest.json (taken_at) last. A backup without a
//     manifest is incomplete and restore refuses it.
//   - A deletion request (best effort, Config.Ledger) and then the deletion
//     worker, before it removes anything of a customer, append
//     {tenant, keyed hash, requested_at, client_id} to the ledger of every
//     registered backup younger than BackupRetention (30 days)
//     (Backups.Ledger); to a backup whose directory is missing (an
//     unmounted disk) or whose ledger cannot be written (read-only) it is
//     owed instead, in <data-dir>/backups-owed.jsonl, until it is back
//     (serve looks every few minutes, RunOwed). Registration precedes the checkpoint,
//     so a deletion requested after a checkpoint reaches that backup's
//     ledger; one requested before it is in the checkpoint as a deletion
//     record.
//   - "admin restore --from DIR" (Backups.Restore, server stopped) reads the
//     deletion records of the store it will replace (when there is one and
//     it opens: an acknowledged deletion the worker had not ledgered yet is
//     only there), copies DIR/db into a staging directory (and the live
//     batch results into another), opens it, re-schedules every deletion
//     of the ledger (and those owed to DIR), every deletion the backup
//     holds as programado (a completado one is done, and what came after it
//     stays) and every deletion of the replaced store the backup does not
//     hold as completado, runs them all to completado (finding customers by
//     keyed hash), and only then registers DIR (and the backups of this
//     installation beside it: registerRestored) and swaps the staging
//     store and results in. Nothing is served from the restored store
//     before every deletion is applied, and a restore that fails before
//     the swap leaves the data dir as it was. A restore holds the data
//     dir's lock, as every process that opens it does (LockDataDir); what
//     one that stopped left is removed, or the dir refused, when it is
//     next opened (RecoverInterrupted).
//   - Backups older than BackupRetention receive no more ledger entries and
//     restore refuses them: they can no longer be brought back. The
//     registry keeps them, apart (backupRegistry.Expired), until "admin
//     backups prune" (Backups.Prune, backuplist.go) removes them; "admin
//     backups" lists them with the others (Backups.List).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/store"
)

// Backups owns the backup registry of one data dir (backups.json) and the
// deletion ledgers of its backups. Build one per process and share it: its
// lock serialises the registry and ledger writers (admin backup runs inside
// serve when serve runs, beside the deletion worker).
type Backups struct {
	dataDir string
	now     func() time.Time
	log     zerolog.Logger
	mu      sync.Mutex
	// owedNext is when DeliverOwedDue next tries the owed deletions; under
	// mu.
	owedNext time.Time
	// appendBackup appends whole lines to the deletion ledger of the
	// backup dir, synced: appendToLedger, or in tests one that fails as a
	// read-only backup does.
	appendBackup func(dir string, lines []byte) error
	// readRegistry reads the file at path (backups.json): os.ReadFile,
	// or in tests one that fails as an unreadable file does (EACCES, EIO).
	readRegistry func(path string) ([]byte, error)
	// registryUnusable is what the last read of backups.json found
	// (loadRegistry, CheckRegistry): RegistryUnusable.
	registryUnusable atomic.Bool
	// taking holds the backup dirs a Take of this process is writing;
	// under mu. Every Take of a data dir runs in the one process that
	// holds it (serve, or the admin command when none runs), so List
	// tells a backup being taken from one that stopped.
	taking map[string]bool
	// pruneMu serialises Prune runs (two admin commands forwarded to one
	// serve); it is taken before mu, never while holding it.
	pruneMu sync.Mutex
	// beforeRemove, when set (tests), runs in Prune before it removes
	// the backup dir, the registry lock released.
	beforeRemove func(dir string)
}

// NewBackups returns the Backups of dataDir; now is the real clock.
func NewBackups(dataDir string, now func() time.Time, log zerolog.Logger) *Backups {
	return &Backups{dataDir: dataDir, now: now, log: log, appendBackup: appendToLedger, readRegistry: os.ReadFile, taking: map[string]bool{}}
}

// BackupRetention is how long a backup keeps receiving deletions and can be
// restored.
const BackupRetention = 30 * 24 * time.Hour

const (
	backupsFile  = "backups.json"       // in the data dir: the registered backups
	ledgerFile   = "deletions.jsonl"    // in a backup dir: deletions after it was taken
	ManifestFile = "manifest.json"      // in a backup dir: written last
	owedFile     = "backups-owed.jsonl" // in the data dir: deletions owed to missing backups
	registryCopy = "backups.copy.json"  // in the data dir: backups.json again
	backupFormat = 1
)

type backupEntry struct {
	Dir      string    `json:"dir"`
	TakenAt  time.Time `json:"taken_at"`
	Complete bool      `json:"complete"`
	// Missing: its directory was not there at the last deletion (owed
	// deletions wait in owedFile).
	Missing bool `json:"missing,omitempty"`
}

type backupRegistry struct {
	Backups []backupEntry `json:"backups"`
	// Expired are the backups past retention (dropExpired moved them out
	// of Backups): they receive no deletions, nothing is owed to them and
	// restore refuses them; they stay listed until Prune removes them. A
	// binary from before this field drops it: those backups are then
	// forgotten, as they all were then.
	Expired []backupEntry `json:"expired,omitempty"`
}

// UnreadableRegistryError says backups.json is there but cannot be read
// (no permission, an I/O error): not damaged content, which is set aside
// and rebuilt, but a file that must not be replaced, as it may name
// backups nothing else does. Meanwhile deletions are owed to every
// registered backup (Ledger) and no backup can be taken or restored.
type UnreadableRegistryError struct {
	Err error // the read's error
}

// Error names the file and the cause without the data dir's path (for
// reports that name the file already: admin check).
func (e *UnreadableRegistryError) Error() string {
	cause := e.Err
	if pe := (*fs.PathError)(nil); errors.As(cause, &pe) {
		cause = pe.Err
	}
	return fmt.Sprintf("%s cannot be read: %v", backupsFile, cause)
}

func (e *UnreadableRegistryError) Unwrap() error { return e.Err }

// loadRegistry reads backups.json. One that does not decode, or is gone
// while its copy is there, never stops a deletion nor keeps it from the
// backups (contract §8): recoverRegistry sets it aside and rebuilds it.
// With neither, no backup was ever registered. One there that cannot be
// read is an *UnreadableRegistryError.
func (bk *Backups) loadRegistry() (*backupRegistry, error) {
	r, data, damage, err := bk.readRegistryFile()
	if damage != nil {
		r, err = bk.recoverRegistry(data, damage)
	}
	bk.registryUnusable.Store(err != nil)
	return r, err
}

// RegistryUnusable reports whether the last read of backups.json found it
// unusable: there but unreadable (an *UnreadableRegistryError), or
// damaged and not rebuilt (its rebuild failed, or CheckRegistry read it
// before a loader did). False before the first read. It reads no file, so
// /metrics calls it at every scrape (coupond_backup_registry_unreadable);
// serve's owed-deletion worker reads the registry at start and every few
// minutes (RunOwed), and every deletion and backup reads it too.
func (bk *Backups) RegistryUnusable() bool { return bk.registryUnusable.Load() }

// readRegistryFile reads backups.json and changes nothing. It returns the
// registry (empty when no backup was ever registered); or, for one that
// cannot be used, why (damage: it does not decode, or it is gone while its
// copy is there) with the bytes it holds; or an *UnreadableRegistryError
// when it is there but cannot be read.
func (bk *Backups) readRegistryFile() (r *backupRegistry, data []byte, damage, err error) {
	r = &backupRegistry{}
	data, err = bk.readRegistry(filepath.Join(bk.dataDir, backupsFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(filepath.Join(bk.dataDir, registryCopy)); errors.Is(err, fs.ErrNotExist) {
			return r, nil, nil, nil
		}
		return nil, nil, fmt.Errorf("%s is gone while %s is there", backupsFile, registryCopy), nil
	}
	if err != nil {
		return nil, nil, nil, &UnreadableRegistryError{Err: err}
	}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, data, fmt.Errorf("%s does not decode: %w", backupsFile, err), nil
	}
	return r, data, nil, nil
}

// saveRegistry writes backups.json and its copy (registryCopy), each
// atomically and synced: a damaged one is rebuilt from the other.
func (bk *Backups) saveRegistry(r *backupRegistry) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(bk.dataDir, backupsFile), 0o600, data); err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(bk.dataDir, registryCopy), 0o600, data)
}

// recoverRegistry rebuilds a backups.json that does not decode (damaged,
// its bytes) or is gone (damaged nil), reading it conservatively: a backup
// registered there must keep receiving deletions, so every backup that may
// have been is registered again. The damaged file, when there is one, is
// set aside (backups.json.damaged-TIME, owner-only, for the operator to
// look at and remove; "admin check" and /metrics count it) and the
// registry is rebuilt from the union of: its copy (saved with it), every
// backup directory (one holding a deletion ledger) named in the damaged
// bytes, every backup named in backups-owed.jsonl (there or missing), and
// every backup directory of this installation (same keys.json) beside
// those. A backup so registered that was not is harmless: it receives
// deletions it does not need.
func (bk *Backups) recoverRegistry(damaged []byte, cause error) (*backupRegistry, error) {
	aside, err := bk.setAsideRegistry()
	if err != nil {
		return nil, err
	}
	found := map[string]backupEntry{}
	var copied backupRegistry
	if data, err := os.ReadFile(filepath.Join(bk.dataDir, registryCopy)); err == nil && json.Unmarshal(data, &copied) == nil {
		for _, b := range copied.Backups {
			found[b.Dir] = b
		}
	}
	// Past retention, they are only Prune's to remove: kept apart.
	expired := make([]backupEntry, 0, len(copied.Expired))
	for _, b := range copied.Expired {
		if _, ok := found[b.Dir]; !ok {
			expired = append(expired, b)
		}
	}
	for _, dir := range jsonStrings(damaged) {
		if _, ok := found[dir]; !ok && filepath.IsAbs(dir) && isBackupDir(dir) {
			found[dir] = backupEntryOf(dir, bk.now())
		}
	}
	// Deletions are owed only to registered backups: one they are owed to
	// stays registered, there or not (its disk unmounted), or they would
	// be dropped, and the next ones not owed to it.
	if owed, _ := bk.readOwed(); len(owed) > 0 { // what it salvaged, whatever its error
		for _, o := range owed {
			if _, ok := found[o.Dir]; ok || !filepath.IsAbs(o.Dir) {
				continue
			}
			if _, err := os.Stat(o.Dir); errors.Is(err, fs.ErrNotExist) {
				found[o.Dir] = backupEntry{Dir: o.Dir, TakenAt: bk.now().UTC(), Missing: true}
			} else if isBackupDir(o.Dir) {
				found[o.Dir] = backupEntryOf(o.Dir, bk.now())
			}
		}
	}
	if keys, err := os.ReadFile(filepath.Join(bk.dataDir, store.SecretsFile)); err == nil {
		bk.addSiblings(found, keys)
	}
	reg := &backupRegistry{Expired: expired}
	for _, b := range found {
		reg.Backups = append(reg.Backups, b)
	}
	sort.Slice(reg.Backups, func(i, j int) bool {
		a, b := reg.Backups[i], reg.Backups[j]
		return a.TakenAt.Before(b.TakenAt) || (a.TakenAt.Equal(b.TakenAt) && a.Dir < b.Dir)
	})
	bk.log.Error().Str("error", cause.Error()).Str("set_aside", aside).Int("backups", len(reg.Backups)).
		Msg("backup registry damaged: set aside and rebuilt from its copy and the backup directories found; deletions keep reaching them")
	return reg, bk.saveRegistry(reg)
}

// setAsideRegistry moves backups.json, when it is there, to
// backups.json.damaged-TIME, owner-only, and returns that path ("" when
// there was none).
func (bk *Backups) setAsideRegistry() (string, error) {
	path := filepath.Join(bk.dataDir, backupsFile)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	aside := path + ".damaged-" + bk.now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(path, aside); err != nil {
		return "", err
	}
	return aside, os.Chmod(aside, 0o600)
}

// SetAside lists the damaged files recoverRegistry and setAsideOwed set
// aside in the data dir (file names: backups.json.damaged-TIME,
// backups-owed.jsonl.damaged-TIME), for "admin check" and /metrics to
// report until the operator removes them.
func (bk *Backups) SetAside() []string {
	names := []string{}
	for _, base := range []string{backupsFile, owedFile} {
		paths, _ := filepath.Glob(filepath.Join(bk.dataDir, base+".damaged-*"))
		for _, p := range paths {
			names = append(names, filepath.Base(p))
		}
	}
	return names
}

// addSiblings adds to found every backup directory of this installation
// (its keys.json of the same installation as keys, the data dir's:
// store.SameInstallation, whatever rotation each was taken under) beside
// one already there.
func (bk *Backups) addSiblings(found map[string]backupEntry, keys []byte) {
	parents := map[string]bool{}
	for dir := range found {
		parents[filepath.Dir(dir)] = true
	}
	for parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			dir := filepath.Join(parent, e.Name())
			if _, ok := found[dir]; ok || !e.IsDir() || !isBackupDir(dir) {
				continue
			}
			if theirs, err := os.ReadFile(filepath.Join(dir, store.SecretsFile)); err == nil && store.SameInstallation(theirs, keys) {
				found[dir] = backupEntryOf(dir, bk.now())
			}
		}
	}
}

// isBackupDir reports whether dir holds a deletion ledger (Take creates
// it before it registers the backup).
func isBackupDir(dir string) bool {
	info, err := os.Stat(filepath.Join(dir, ledgerFile))
	return err == nil && info.Mode().IsRegular()
}

// backupEntryOf is the registry entry of the backup dir: taken when its
// manifest says, or, without one (a backup being taken), now, which keeps
// it receiving deletions for the whole retention.
func backupEntryOf(dir string, now time.Time) backupEntry {
	var m Manifest
	if data, err := os.ReadFile(filepath.Join(dir, ManifestFile)); err == nil && json.Unmarshal(data, &m) == nil && !m.TakenAt.IsZero() {
		return backupEntry{Dir: dir, TakenAt: m.TakenAt, Complete: true}
	}
	return backupEntry{Dir: dir, TakenAt: now.UTC()}
}

// jsonStrings returns the JSON string literals found in data, which need
// not be valid JSON as a whole (a file cut short or partly overwritten).
func jsonStrings(data []byte) []string {
	lits := regexp.MustCompile(`"(?:[^"\\\x00-\x1f]|\\.)*"`).FindAll(data, -1)
	var out []string
	for _, lit := range lits {
		var s string
		if json.Unmarshal(lit, &s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// appendToLedger appends lines to the ledger of the backup dir, synced
// (atomicfile.Append, which first cuts off a torn last line: run into
// this one, it would make the ledger unreadable and the backup
// unrestorable). It refuses, so that the deletion is owed to the backup
// (Ledger), a dir another user could have swapped since the backup was
// taken (checkBackupPlace): there the ledger could be their symbolic link,
// through which the cut and the append would reach any file this user can
// write.
func appendToLedger(dir string, lines []byte) error {
	if err := checkBackupPlace(dir); err != nil {
		return err
	}
	return atomicfile.Append(filepath.Join(dir, ledgerFile), 0o600, lines)
}

// checkBackupPlace refuses the backup dir dir when another user could
// replace it or what it holds (store.SwappableBy): they could rename the
// backup away and put their own directory in its place, holding a ledger
// that links to any file, or keys and a store of their making for a
// restore.
func checkBackupPlace(dir string) error {
	d, why, err := store.SwappableBy(dir)
	if err != nil || d == "" {
		return err
	}
	return fmt.Errorf("backup %s: %s %s, who could swap the backup: keep backups in directories only this user (or root) can change", dir, d, why)
}

// Ledger records a deletion in every registered backup within retention
// (the DeletionHooks.Ledger of the live store). Backups past retention are
// dropped from the registry. A registered backup whose directory is not
// there (its disk unmounted) is kept, marked missing, and the deletion is
// owed to it instead (owedFile, in the data dir, synced): delivered to its
// ledger once it is back (deliverOwed: at every Ledger, backup and
// restore, and on its own every few minutes in serve, RunOwed), and
// re-applied by a restore of it into this data dir before that. So is a
// deletion whose backup's ledger cannot be written (read-only, no
// permission, its disk full or failing): one such backup never holds back
// the erasure, nor the other backups. Only a deletion that can be neither
// written to a backup's ledger nor owed to it is an error: the deletion
// waits. Owed deletions not deliverable yet are logged, never an error.
// A registry that cannot be read (UnreadableRegistryError) does not hold
// back the erasure either: the deletion is owed to every registered
// backup (oweEveryBackup) until it can.
func (bk *Backups) Ledger(l LedgerEntry) error {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	reg, err := bk.loadRegistry()
	if unreadable := (*UnreadableRegistryError)(nil); errors.As(err, &unreadable) {
		return bk.oweEveryBackup(l, unreadable)
	}
	if err != nil {
		return err
	}
	changed := bk.dropExpired(reg)
	if err := bk.deliverOwed(reg); err != nil {
		bk.log.Warn().Err(err).Msg("deletions owed to backups not all delivered; kept and retried later")
	}
	line, err := json.Marshal(l)
	if err != nil {
		return err
	}
	for i := range reg.Backups {
		b := &reg.Backups[i]
		_, err := os.Stat(b.Dir)
		missing := errors.Is(err, fs.ErrNotExist)
		if missing != b.Missing {
			b.Missing, changed = missing, true
			bk.logMissing(b.Dir, missing)
		}
		if !missing {
			if err = bk.appendBackup(b.Dir, append(line, '\n')); err != nil {
				bk.log.Warn().Err(err).Str("backup", b.Dir).Str("owed", filepath.Join(bk.dataDir, owedFile)).
					Msg("backup ledger cannot be written: the deletion is owed to it and delivered once it can")
			}
		}
		if missing || err != nil {
			err = bk.owe(owedEntry{Dir: b.Dir, LedgerEntry: l})
		}
		if err != nil {
			return fmt.Errorf("backup %s: %w", b.Dir, err)
		}
	}
	if changed {
		return bk.saveRegistry(reg)
	}
	return nil
}

// dropExpired moves the backups of reg past retention from its Backups
// to its Expired (where Prune finds them), reporting whether it moved
// any.
func (bk *Backups) dropExpired(reg *backupRegistry) bool {
	kept, gone := bk.splitExpired(reg.Backups)
	for _, b := range gone {
		bk.log.Info().Str("backup", b.Dir).Msg("backup past retention: it receives no more deletions and restore refuses it; 'admin backups prune' removes it")
	}
	reg.Backups, reg.Expired = kept, append(reg.Expired, gone...)
	return len(gone) > 0
}

// splitExpired splits backups into those within retention and those past
// it (no longer marked missing: nothing is owed to them), changing
// nothing.
func (bk *Backups) splitExpired(backups []backupEntry) (kept, gone []backupEntry) {
	for _, b := range backups {
		if bk.pastRetention(b.TakenAt) {
			b.Missing = false
			gone = append(gone, b)
			continue
		}
		kept = append(kept, b)
	}
	return kept, gone
}

// pastRetention reports whether a backup taken at takenAt is past
// retention by the injected clock.
func (bk *Backups) pastRetention(takenAt time.Time) bool {
	return bk.now().Sub(takenAt) > BackupRetention
}

func (bk *Backups) logMissing(dir string, missing bool) {
	if missing {
		bk.log.Warn().Str("backup", dir).Str("owed", filepath.Join(bk.dataDir, owedFile)).
			Msg("registered backup directory not found (disk unmounted?): deletions are kept for it and delivered to its ledger when it is back")
		return
	}
	bk.log.Info().Str("backup", dir).Msg("registered backup directory is back: the deletions owed to it go to its ledger")
}

// owedEntry is one line of owedFile: a deletion owed to the backup Dir,
// or, with EveryBackup (and Dir empty), to every backup registered when it
// is delivered: owed while the registry could not be read
// (oweEveryBackup). Delivery replaces such a line with one per registered
// backup (expandOwed); a binary without EveryBackup sets it aside as
// damaged rather than drop it.
type owedEntry struct {
	Dir         string `json:"dir"`
	EveryBackup bool   `json:"every_backup,omitempty"`
	LedgerEntry
}

// oweEveryBackup records, synced, that the deletion l is owed to every
// registered backup, the registry being unreadable (cause), and logs it
// (never l, which holds a customer's keyed hash). Its error says it could
// not be owed either: the deletion then waits.
func (bk *Backups) oweEveryBackup(l LedgerEntry, cause *UnreadableRegistryError) error {
	if err := bk.owe(owedEntry{EveryBackup: true, LedgerEntry: l}); err != nil {
		return fmt.Errorf("%w; the deletion could not be owed to the backups either: %w", cause, err)
	}
	bk.log.Error().Str("error", cause.Error()).Str("owed", filepath.Join(bk.dataDir, owedFile)).
		Msg("backup registry cannot be read: the deletion is owed to every registered backup and delivered once it can be read (admin check reports it)")
	return nil
}

// owe appends o, a deletion owed to a backup (or to every backup), to
// owedFile, synced.
func (bk *Backups) owe(o owedEntry) error {
	line, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if err := atomicfile.Append(filepath.Join(bk.dataDir, owedFile), 0o600, append(line, '\n')); err != nil {
		return err
	}
	return atomicfile.SyncDir(bk.dataDir)
}

// readOwed returns the deletions of owedFile. A line that does not decode
// (a torn write, bytes flipped or overwritten) never stops a deletion nor
// startup: the lines that decode are returned, and the others are set
// aside (setAsideOwed) and owedFile rewritten without them. It returns
// what it salvaged even with an error, which says owedFile could not be
// read or mended: a caller must then not rewrite it (the damaged bytes
// would be lost).
func (bk *Backups) readOwed() ([]owedEntry, error) {
	path := filepath.Join(bk.dataDir, owedFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out, kept, damaged, lines := parseOwed(data)
	if lines == 0 {
		return out, nil
	}
	return out, bk.setAsideOwed(damaged, kept, lines)
}

// parseOwed splits data, owedFile's bytes, into the deletions that decode
// (out, and their lines: kept) and the lines that do not (damaged, lines
// of them).
func parseOwed(data []byte) (out []owedEntry, kept, damaged []byte, lines int) {
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		body := bytes.TrimRight(line, "\n")
		if len(bytes.TrimSpace(body)) == 0 {
			continue
		}
		var o owedEntry
		if json.Unmarshal(body, &o) != nil || (o.Dir == "") != o.EveryBackup {
			damaged = append(damaged, line...)
			lines++
			continue
		}
		out = append(out, o)
		kept = append(append(kept, body...), '\n')
	}
	return out, kept, damaged, lines
}

// setAsideOwed moves the damaged lines of owedFile (damaged, lines of
// them) to backups-owed.jsonl.damaged-TIME (owner-only, for the operator
// to look at and remove; "admin check" and /metrics count it, SetAside),
// then rewrites owedFile with the lines kept, and logs it: never the
// bytes, which may hold a customer's keyed hash.
func (bk *Backups) setAsideOwed(damaged, kept []byte, lines int) error {
	path := filepath.Join(bk.dataDir, owedFile)
	aside := path + ".damaged-" + bk.now().UTC().Format("20060102T150405.000000000Z")
	err := atomicfile.WriteBytes(aside, 0o600, damaged)
	if err == nil {
		err = atomicfile.WriteBytes(path, 0o600, kept)
	}
	if err != nil {
		bk.log.Error().Err(err).Str("owed", path).Int("damaged_lines", lines).
			Msg("deletions owed to backups: damaged lines found and not set aside; the others are still delivered, retried later")
		return fmt.Errorf("%s: %d damaged lines not set aside: %w", path, lines, err)
	}
	bk.log.Warn().Str("owed", path).Str("set_aside", aside).Int("damaged_lines", lines).Int("damaged_bytes", len(damaged)).
		Msg("deletions owed to backups: damaged lines set aside, the others kept and delivered; a restore still re-applies the deletions of the store it replaces")
	return nil
}

// CheckOwed reads the deletions owed to backups as a delivery would, so
// that damaged lines there are set aside (readOwed) and listed by SetAside
// now rather than at serve's next try; "admin check" calls it. Its error
// says owedFile could not be read or mended.
func (bk *Backups) CheckOwed() error {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	_, err := bk.readOwed()
	return err
}

// owedTo returns the deletions owed to the backup dir, those owed to
// every registered backup included.
func (bk *Backups) owedTo(dir string) ([]LedgerEntry, error) {
	owed, err := bk.readOwed()
	var out []LedgerEntry
	for _, o := range owed {
		if o.Dir == dir || o.EveryBackup {
			out = append(out, o.LedgerEntry)
		}
	}
	return out, err
}

// DefaultOwedEvery is how often RunOwed tries the deletions owed to
// backups when its caller sets no period.
const DefaultOwedEvery = 5 * time.Minute

// owedPoll bounds how long RunOwed waits between looks at the clock.
const owedPoll = 15 * time.Second

// RunOwed delivers, until ctx ends, the deletions owed to registered
// backups whose directories are back, without waiting for a deletion, a
// backup or a restore: at once, then every `every` (DefaultOwedEvery when
// not positive; see DeliverOwedDue). A failure is retried at the next
// period and logged as owedLog says: when the tries start failing and when
// they succeed again, and in between at most once every owedLogEvery.
func (bk *Backups) RunOwed(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultOwedEvery
	}
	tick := time.NewTicker(min(every, owedPoll))
	defer tick.Stop()
	var st owedLog
	for {
		bk.tryOwed(&st, every)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// owedLogEvery is how often RunOwed logs tries that keep failing.
const owedLogEvery = time.Hour

// owedLog is what RunOwed logged of its tries: a registry or ledger that
// stays unreadable fails every try alike, and a line every few minutes
// would bury the rest of the log.
type owedLog struct {
	failing  bool      // the last try failed
	since    time.Time // when the tries started failing
	logged   time.Time // when a failure was last logged
	unlogged int       // failed tries since then, not logged
}

// tryOwed makes RunOwed's try when one is due (deliverOwedDue) and logs
// its outcome, by the injected clock: the first failure, then one failure
// every owedLogEvery (or when the clock went back past the last one) with
// the count of those not logged in between, and the first success after
// failures.
func (bk *Backups) tryOwed(st *owedLog, every time.Duration) {
	tried, err := bk.deliverOwedDue(every)
	if !tried {
		return
	}
	now := bk.now()
	owed := filepath.Join(bk.dataDir, owedFile)
	switch {
	case err == nil && st.failing:
		bk.log.Info().Str("owed", owed).Time("failing_since", st.since).Int("failed_tries_not_logged", st.unlogged).
			Msg("deletions owed to backups delivered again")
		*st = owedLog{}
	case err == nil:
	case !st.failing || now.Sub(st.logged) >= owedLogEvery || now.Before(st.logged):
		ev := bk.log.Error().Err(err).Str("owed", owed).Dur("retry_in", every)
		if st.failing {
			ev = ev.Time("failing_since", st.since).Int("failed_tries_not_logged", st.unlogged)
		} else {
			st.failing, st.since = true, now
		}
		ev.Msg("deletions owed to backups not delivered; retried later, logged again within the hour while it lasts")
		st.logged, st.unlogged = now, 0
	default:
		st.unlogged++
	}
}

// DeliverOwedDue delivers the deletions owed to registered backups whose
// directories are back (deliverOwed) when a try is due by the injected
// clock: at the first call, then once every has passed since the last try,
// whether it failed or not, or at once when the clock went back past the
// last try. It returns the try's error; nil when none was
// due. Tests call it after moving the clock.
func (bk *Backups) DeliverOwedDue(every time.Duration) error {
	_, err := bk.deliverOwedDue(every)
	return err
}

// deliverOwedDue is DeliverOwedDue, also saying whether a try was due.
func (bk *Backups) deliverOwedDue(every time.Duration) (tried bool, err error) {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	now := bk.now()
	// A next try more than every away: the clock went back (NTP, an
	// operator), and waiting for it would hold the deliveries back as long.
	if !bk.owedNext.IsZero() && now.Before(bk.owedNext) && bk.owedNext.Sub(now) <= every {
		return false, nil
	}
	bk.owedNext = now.Add(every)
	reg, err := bk.loadRegistry()
	if err != nil {
		return true, err
	}
	return true, bk.deliverOwed(reg)
}

// deliverOwed appends the deletions owed to each registered backup whose
// directory is there to its ledger, and rewrites owedFile with what is
// left (owed to a backup still missing, or whose ledger cannot be written
// yet; those of backups no longer registered, past retention, go). A
// crash in between delivers some twice, which a restore reads as once.
// Deletions owed to every registered backup are first owed to each
// (expandOwed) and owedFile is then rewritten even when none is delivered.
// Its error names the backups not delivered to; the others were.
func (bk *Backups) deliverOwed(reg *backupRegistry) error {
	read, err := bk.readOwed()
	if err != nil || len(read) == 0 {
		return err
	}
	owed, expanded := expandOwed(read, reg)
	registered := map[string]bool{}
	for _, b := range reg.Backups {
		registered[b.Dir] = true
	}
	byDir := map[string][]owedEntry{}
	var left []owedEntry
	for _, o := range owed {
		_, err := os.Stat(o.Dir)
		switch {
		case !registered[o.Dir]:
		case errors.Is(err, fs.ErrNotExist):
			left = append(left, o)
		default:
			byDir[o.Dir] = append(byDir[o.Dir], o)
		}
	}
	var failed []error
	for dir, entries := range byDir {
		if err := bk.appendBackup(dir, ledgerLines(entries)); err != nil {
			failed = append(failed, fmt.Errorf("backup %s: deletions owed to it: %w", dir, err))
			left = append(left, entries...)
			continue
		}
		bk.log.Info().Str("backup", dir).Msg("deletions owed to a backup delivered to its ledger")
	}
	if len(left) == len(owed) && !expanded {
		return errors.Join(failed...) // nothing delivered, nothing dropped
	}
	return errors.Join(append(failed, bk.writeOwed(left))...)
}

// expandOwed returns owed with each deletion owed to every registered
// backup replaced by one owed to each backup of reg, and whether there was
// any.
func expandOwed(owed []owedEntry, reg *backupRegistry) ([]owedEntry, bool) {
	out := make([]owedEntry, 0, len(owed))
	expanded := false
	for _, o := range owed {
		if !o.EveryBackup {
			out = append(out, o)
			continue
		}
		expanded = true
		for _, b := range reg.Backups {
			out = append(out, owedEntry{Dir: b.Dir, LedgerEntry: o.LedgerEntry})
		}
	}
	return out, expanded
}

// ledgerLines is entries as lines of a backup's ledger.
func ledgerLines(entries []owedEntry) []byte {
	var out []byte
	for _, o := range entries {
		line, _ := json.Marshal(o.LedgerEntry)
		out = append(append(out, line...), '\n')
	}
	return out
}

// writeOwed rewrites owedFile with owed, or removes it when none is left.
func (bk *Backups) writeOwed(owed []owedEntry) error {
	path := filepath.Join(bk.dataDir, owedFile)
	if len(owed) == 0 {
		return os.Remove(path)
	}
	var data []byte
	for _, o := range owed {
		line, _ := json.Marshal(o)
		data = append(append(data, line...), '\n')
	}
	return atomicfile.WriteBytes(path, 0o600, data)
}

// Manifest is DIR/manifest.json.
type Manifest struct {
	Format        int       `json:"format"`
	TakenAt       time.Time `json:"taken_at"`
	CompletedAt   time.Time `json:"completed_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	RetentionDays int       `json:"retention_days"`
	Version       string    `json:"coupond_version"`
	Bytes         int64     `json:"bytes"`
	Files         int       `json:"files"`
	Tenants       []string  `json:"tenants"`
	// SHA256 is the hex SHA-256 of every file of the backup's db, by its
	// slash-separated path under db: restore refuses a backup whose files
	// differ (a flipped byte keeps the size, and a damaged log read back
	// by the store can silently end early, dropping acknowledged writes).
	// Backups made before it have none and are checked by size and count.
	SHA256 map[string]string `json:"sha256,omitempty"`
	// KeysSHA256 is the hex SHA-256 of the backup's keys.json: a byte
	// changed there that still decodes would restore other keys (every
	// token, decision id and customer hash void, the deletions the ledger
	// names by hash left undone), and one restored beside the installation's
	// own keys was refused as "another installation". Backups made before it
	// have none.
	KeysSHA256 string `json:"keys_sha256,omitempty"`
}

// Take takes a backup of db into dir (see the file comment): dir must lie
// outside the data dir and be missing or empty. A backup that fails
// removes what it made and no more (discard): dir and its parents when it
// created them, else only the files it wrote into the operator's dir. So
// does one whose ctx ends (the admin client interrupted, serve stops)
// before its manifest is written, returning ctx's error: between its
// steps and between two files it checksums (the checkpoint itself runs to
// its end). Once the manifest is written the backup is complete and Take
// finishes it.
func (bk *Backups) Take(ctx context.Context, db *store.DB, dir, version string, progress io.Writer) (*Manifest, error) {
	// Registered by its real path: a symbolic link's own path would leave
	// prune, listing and sizes with the link instead of the backup.
	dir = resolvedPath(dir)
	created, err := bk.prepareDir(dir)
	if err != nil {
		return nil, err
	}
	bk.setTaking(dir, true)
	defer bk.setTaking(dir, false)
	// The ledger and the registration come before the checkpoint: a deletion
	// the checkpoint misses is then in the ledger.
	takenAt := bk.now().UTC()
	if err := claimLedger(filepath.Join(dir, ledgerFile)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another backup claimed dir since prepareDir looked: all it
			// made is that one's.
			return nil, fmt.Errorf("--out %s: another backup is being taken into it", dir)
		}
		bk.discard(dir, created, false)
		return nil, err
	}
	if err := bk.updateRegistry(func(reg *backupRegistry) bool {
		reg.Backups = append(reg.Backups, backupEntry{Dir: dir, TakenAt: takenAt})
		// An expired backup once there (removed by hand, its path
		// reused) is no longer Prune's to remove.
		reg.Expired = slices.DeleteFunc(reg.Expired, func(b backupEntry) bool { return b.Dir == dir })
		return true
	}); err != nil {
		bk.discard(dir, created, true)
		return nil, err
	}
	m, err := bk.copyInto(ctx, db, dir, takenAt, version, progress)
	if err != nil {
		bk.discard(dir, created, true)
		return nil, err
	}
	if err := bk.updateRegistry(func(reg *backupRegistry) bool {
		for i := range reg.Backups {
			if reg.Backups[i].Dir == dir {
				reg.Backups[i].Complete = true
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	bk.log.Info().Str("dir", dir).Int64("bytes", m.Bytes).Msg("backup taken")
	return m, nil
}

// setTaking records, under mu, whether a Take of this process is writing
// dir (List's being-taken).
func (bk *Backups) setTaking(dir string, on bool) {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if on {
		bk.taking[dir] = true
		return
	}
	delete(bk.taking, dir)
}

// discard undoes a failed Take of dir: the registration (when registered)
// and what Take made. created are the directories prepareDir made,
// outermost first: dir then goes whole and each parent once empty;
// without them dir was the operator's and keeps everything but the files
// Take writes.
func (bk *Backups) discard(dir string, created []string, registered bool) {
	if registered {
		if err := bk.updateRegistry(func(reg *backupRegistry) bool {
			kept := reg.Backups[:0:0]
			for _, b := range reg.Backups {
				if b.Dir != dir {
					kept = append(kept, b)
				}
			}
			reg.Backups = kept
			return true
		}); err != nil {
			// A registration that failed may or may not have reached the disk
			// (an error after the rename): the log cannot say which.
			bk.log.Warn().Err(err).Str("backup", dir).Msg("failed backup may be left registered (admin backups lists it if so): deletions owed to it are kept until retention")
		}
	}
	if len(created) == 0 {
		for _, name := range []string{ManifestFile, store.SecretsFile, "db", ledgerFile} {
			os.RemoveAll(filepath.Join(dir, name))
		}
		return
	}
	os.RemoveAll(dir)
	for i := len(created) - 2; i >= 0; i-- {
		os.Remove(created[i]) // only when empty: another backup may have started there
	}
}

// prepareDir checks that dir is outside the data dir and missing or empty,
// creates it and makes it owner-only. It returns the directories it
// created, outermost first (none when dir was there).
func (bk *Backups) prepareDir(dir string) (created []string, err error) {
	dirAbs, _ := filepath.Abs(dir)
	if within(resolvedPath(dir), resolvedPath(bk.dataDir)) {
		return nil, fmt.Errorf("--out %s is inside the data dir; put backups elsewhere", dir)
	}
	if names, err := os.ReadDir(dir); err == nil && len(names) > 0 {
		return nil, fmt.Errorf("--out %s exists and is not empty", dir)
	}
	// A directory there already, another user's (or behind a symbolic
	// link to one), would let its owner swap the backup's deletion ledger
	// or keys before a restore.
	if info, err := os.Stat(dir); err == nil {
		if uid, ok := store.FileOwner(info); ok && uid != os.Getuid() {
			return nil, fmt.Errorf("--out %s belongs to another user (uid %d), who could change the backup: give a directory this user owns, or a new one", dir, uid)
		}
	}
	if err := checkBackupPlace(dir); err != nil {
		return nil, err
	}
	for d := dirAbs; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) || d == filepath.Dir(d) {
			break
		}
		created = append([]string{d}, created...)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return created, os.Chmod(dir, 0o700) // it may exist, empty, with a wider mode
}

// resolvedPath is path made absolute with its symbolic links resolved,
// those of its parent when path is not there yet.
func resolvedPath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	if parent, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(parent, filepath.Base(abs))
	}
	return abs
}

// updateRegistry loads the registry under the lock, lets fn change it and
// saves it when fn says so.
func (bk *Backups) updateRegistry(fn func(reg *backupRegistry) bool) error {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	reg, err := bk.loadRegistry()
	if err != nil {
		return err
	}
	// Deletions owed to a backup that is back go to its ledger now rather
	// than at the next deletion: a failure waits for that one.
	if err := bk.deliverOwed(reg); err != nil {
		bk.log.Warn().Err(err).Msg("deletions owed to a backup not delivered yet; retried later")
	}
	if !fn(reg) {
		return nil
	}
	return bk.saveRegistry(reg)
}

// copyInto takes the checkpoint into dir/db, copies the keys and writes the
// manifest, last; it stops with ctx's error, before the manifest, once ctx
// ends.
func (bk *Backups) copyInto(ctx context.Context, db *store.DB, dir string, takenAt time.Time, version string, progress io.Writer) (*Manifest, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	keys, err := bk.copyStoreAndKeys(db, dir, progress)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	size, files := dirSizeFiles(filepath.Join(dir, "db"))
	fmt.Fprintf(progress, "backup: %s\n", progressBar(size, max(size, 1)))
	if err := syncTree(filepath.Join(dir, "db")); err != nil {
		return nil, err
	}
	sums, err := digests(ctx, filepath.Join(dir, "db"))
	if err != nil {
		return nil, err
	}
	m := &Manifest{Format: backupFormat, TakenAt: takenAt, CompletedAt: bk.now().UTC(), ExpiresAt: takenAt.Add(BackupRetention),
		RetentionDays: int(BackupRetention / (24 * time.Hour)), Version: version, Bytes: size, Files: files, Tenants: []string{}, SHA256: sums,
		KeysSHA256: bytesDigest(keys)}
	for _, t := range db.Tenants() {
		m.Tenants = append(m.Tenants, t.ID)
	}
	data, _ := json.MarshalIndent(m, "", "  ")
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, ManifestFile), 0o600, data); err != nil {
		return nil, err
	}
	return m, nil
}

// checkpoint takes a Pebble checkpoint into dst, printing progress every
// 250 ms.
func checkpoint(db *store.DB, dst string, progress io.Writer) error {
	total := int64(db.DiskSpaceUsage())
	fmt.Fprintf(progress, "backup: checkpoint of %.1f MB into %s\n", float64(total)/1e6, filepath.Dir(dst))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				n, _ := dirSize(dst)
				fmt.Fprintf(progress, "backup: %s\n", progressBar(n, total))
			}
		}
	}()
	err := db.Checkpoint(dst)
	close(done)
	wg.Wait()
	return err
}

// claimLedger creates the empty ledger at path, synced, and fails with
// fs.ErrExist when it is there: creating it claims its backup directory,
// so that of two backups into one directory at once only one goes on
// (the other, discarding what it made, removed the first one's).
func claimLedger(path string) error { return atomicfile.CreateEmpty(path, 0o600) }

// progressBar draws n bytes copied of about total: total is the store's
// size when the checkpoint began, an estimate the copy may pass (the WAL,
// a flush), so past it the bar reads full at n of n, never 0.1/0.0 MB.
func progressBar(n, total int64) string {
	total = max(total, n, 1)
	frac := float64(n) / float64(total)
	const width = 30
	full := int(frac * width)
	return fmt.Sprintf("[%s%s] %3.0f%% %.1f/%.1f MB", strings.Repeat("#", full), strings.Repeat(".", width-full), frac*100, float64(n)/1e6, float64(total)/1e6)
}

func dirSize(dir string) (int64, error) {
	n, _ := dirSizeFiles(dir)
	return n, nil
}

func dirSizeFiles(dir string) (size int64, files int) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			size += info.Size()
			files++
		}
		return nil
	})
	return size, files
}

// digests returns the hex SHA-256 of every regular file under dir, by its
// slash-separated path relative to dir (Manifest.SHA256). It stops with
// ctx's error, before the next file, once ctx ends.
func digests(ctx context.Context, dir string) (map[string]string, error) {
	sums := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		sum, err := fileDigest(path)
		sums[filepath.ToSlash(rel)] = sum
		return err
	})
	return sums, err
}

// bytesDigest is the hex SHA-256 of b.
func bytesDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fileDigest is the hex SHA-256 of the file at path.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// syncTree fsyncs every file and directory under dir.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
}

// copyStoreAndKeys takes the checkpoint of db into dir/db and copies the
// keys (copyKeys), with no key rotation in between (store.HoldSecrets):
// the copy's fingerprint is of the keys it gets.
func (bk *Backups) copyStoreAndKeys(db *store.DB, dir string, progress io.Writer) ([]byte, error) {
	release := db.HoldSecrets()
	defer release()
	if err := checkpoint(db, filepath.Join(dir, "db"), progress); err != nil {
		return nil, err
	}
	return copyKeys(db, bk.dataDir, dir)
}

// copyKeys copies dataDir's keys.json into the backup dir, refusing keys
// that are not those db, whose copy the backup holds, was written with
// (CheckSecretsFile), and returns its bytes.
func copyKeys(db *store.DB, dataDir, dir string) ([]byte, error) {
	keysPath := filepath.Join(dataDir, store.SecretsFile)
	keys, err := os.ReadFile(keysPath)
	if err != nil {
		return nil, err
	}
	if err := db.CheckSecretsFile(keys, keysPath); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return keys, atomicfile.WriteBytes(filepath.Join(dir, store.SecretsFile), 0o600, keys)
}
