package privacy

// The operator's view of the backups of a data dir: List ("admin
// backups") and Prune ("admin backups prune"). See backup.go for the
// registry and the ledgers they read.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// The states of a registered backup, as List reports them.
const (
	BackupComplete        = "complete"         // its manifest is there: restorable within retention
	BackupBeingTaken      = "being-taken"      // a Take of this process is writing it
	BackupIncomplete      = "incomplete"       // no manifest and no Take: a backup that stopped; restore refuses it
	BackupMissing         = "missing"          // its directory is not there (an unmounted disk?)
	BackupDamagedManifest = "damaged-manifest" // its manifest cannot be read or does not decode
	BackupPastRetention   = "past-retention"   // complete but past retention: Prune removes it
	BackupDamaged         = "damaged"          // its store differs from its manifest (a file missing, cut short or, with verify, changed): restore refuses it
)

// BackupInfo is one registered backup as List reports it; its times are
// UTC.
type BackupInfo struct {
	Dir       string    `json:"dir"`
	TakenAt   time.Time `json:"taken_at"`
	ExpiresAt time.Time `json:"expires_at"` // TakenAt plus BackupRetention
	State     string    `json:"state"`      // one of the Backup* states
	Bytes     int64     `json:"bytes"`      // of every file under Dir
	// LedgerEntries are the deletions its ledger holds (lines that
	// decode); OwedDeletions those owed to it in backups-owed.jsonl,
	// those owed to every backup included.
	LedgerEntries int `json:"ledger_entries"`
	OwedDeletions int `json:"owed_deletions"`
	// TenantDeletions and OwedTenantDeletions are the tenants' deletions
	// among them ("admin tenant delete").
	TenantDeletions     int    `json:"tenant_deletions"`
	OwedTenantDeletions int    `json:"owed_tenant_deletions"`
	Note                string `json:"note,omitempty"` // what is wrong, for the states that are not complete
}

// NeedsOperator reports whether restore refuses b and it stays so until
// the operator looks at it and removes it: damaged, damaged-manifest or
// incomplete (a backup that stopped; Prune leaves it too). "admin backups"
// exits 1 for one and the console shows it in red.
func (b BackupInfo) NeedsOperator() bool {
	switch b.State {
	case BackupDamaged, BackupDamagedManifest, BackupIncomplete:
		return true
	}
	return false
}

// BackupList is List's answer.
type BackupList struct {
	// Backups are sorted by TakenAt, then Dir; never nil.
	Backups []BackupInfo
	// RegistryErr says why backups.json cannot be used, as CheckRegistry
	// does; Backups are then its copy's (FromCopy), or none when the copy
	// cannot be read either.
	RegistryErr error
	FromCopy    bool
	// OwedErr says backups-owed.jsonl could not be read whole: the
	// OwedDeletions count only the lines read.
	OwedErr error
}

// List reports every backup the registry holds, those past retention
// included, and changes nothing. Each backup's store is checked against
// its manifest by its files' total size and count; with verify, by each
// file's checksum too, as restore does (it reads every file). It changes
// nothing: a damaged registry is not rebuilt (the
// next backup, deletion or Prune does it) nor are damaged lines of the
// owed deletions set aside (admin check does it). It stops with ctx's
// error once ctx ends (the admin client interrupted, serve stops): between
// two backups, and with verify between two files it checksums. With
// verify, it writes a line to progress (nil: none) as it has read each
// backup: a verify reads every backup whole (30 days of backups every 6
// hours of a year's store of 730 MB: 120 backups, 88 GB), and it printed
// nothing until the list.
func (bk *Backups) List(ctx context.Context, verify bool, progress io.Writer) (*BackupList, error) {
	bk.mu.Lock()
	reg, regErr, fromCopy := bk.peekRegistry()
	owed, owedErr := bk.peekOwed()
	taking := maps.Clone(bk.taking)
	bk.mu.Unlock()
	out := &BackupList{Backups: []BackupInfo{}, RegistryErr: regErr, FromCopy: fromCopy, OwedErr: owedErr}
	all := slices.Concat(reg.Backups, reg.Expired)
	var read int64
	for i, b := range all {
		expired := i >= len(reg.Backups)
		inf := bk.info(ctx, b, expired, taking[b.Dir] && !expired, verify, owed)
		out.Backups = append(out.Backups, inf)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if verify && progress != nil {
			read += inf.Bytes
			fmt.Fprintf(progress, "backups: %d/%d checked, %.1f MB, %s: %s\n", i+1, len(all), float64(read)/1e6, b.Dir, inf.State)
		}
	}
	sort.SliceStable(out.Backups, func(i, j int) bool {
		a, b := out.Backups[i], out.Backups[j]
		return a.TakenAt.Before(b.TakenAt) || (a.TakenAt.Equal(b.TakenAt) && a.Dir < b.Dir)
	})
	return out, nil
}

// peekRegistry reads backups.json, under mu, changing nothing; when it
// cannot be used it says why (regErr) and returns its copy's backups
// (fromCopy) or none. It sets what RegistryUnusable reports, as
// CheckRegistry does.
func (bk *Backups) peekRegistry() (reg *backupRegistry, regErr error, fromCopy bool) {
	reg, _, damage, err := bk.readRegistryFile()
	regErr = errors.Join(damage, err)
	bk.registryUnusable.Store(regErr != nil)
	if regErr == nil {
		return reg, nil, false
	}
	var copied backupRegistry
	data, err := os.ReadFile(filepath.Join(bk.dataDir, registryCopy))
	if err != nil || json.Unmarshal(data, &copied) != nil {
		return &backupRegistry{}, regErr, false
	}
	return &copied, regErr, true
}

// peekOwed reads the deletions owed to backups, under mu, changing
// nothing: the lines that decode, and an error when the file cannot be
// read or holds damaged lines.
func (bk *Backups) peekOwed() ([]owedEntry, error) {
	data, err := os.ReadFile(filepath.Join(bk.dataDir, owedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s cannot be read: %w", owedFile, pathless(err))
	}
	out, _, _, lines := parseOwed(data)
	if lines > 0 {
		return out, fmt.Errorf("%s: %d damaged lines, not counted ('admin check' sets them aside)", owedFile, lines)
	}
	return out, nil
}

// pathless is err without the path of an *fs.PathError.
func pathless(err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// info is List's report of the registered backup b (expired: one of
// the registry's Expired; taking: a Take is writing it).
func (bk *Backups) info(ctx context.Context, b backupEntry, expired, taking, verify bool, owed []owedEntry) BackupInfo {
	inf := BackupInfo{Dir: b.Dir, TakenAt: b.TakenAt.UTC(), ExpiresAt: b.TakenAt.Add(BackupRetention).UTC()}
	owedHere := map[ledgerDeletion]bool{}
	owedTenants := 0
	for _, o := range owed {
		if o.Dir == b.Dir || (o.EveryBackup && !expired) {
			k := ledgerDeletionOf(o.LedgerEntry)
			if !owedHere[k] && o.Kind == LedgerTenant {
				owedTenants++
			}
			owedHere[k] = true
		}
	}
	inf.OwedDeletions, inf.OwedTenantDeletions = len(owedHere), owedTenants
	if _, err := os.Stat(b.Dir); errors.Is(err, fs.ErrNotExist) {
		inf.State, inf.Note = BackupMissing, "directory not there (disk unmounted?)"
		if !expired {
			inf.Note += ": deletions are owed to it until it is back"
		}
		return inf
	}
	inf.Bytes, _ = dirSizeFiles(b.Dir)
	entries, tenants, ledgerErr := countLedger(b.Dir)
	inf.LedgerEntries, inf.TenantDeletions = entries, tenants
	if tenants > 0 || owedTenants > 0 {
		// A tenant's deletion is one entry of the counts: say which.
		inf.Note = fmt.Sprintf("tenant deletions: %d in its ledger, %d owed", tenants, owedTenants)
	}
	var stateNote string
	inf.State, stateNote = bk.state(ctx, b, expired, taking, verify)
	inf.Note = joinNotes(stateNote, inf.Note)
	if ledgerErr != nil {
		inf.Note = joinNotes(inf.Note, ledgerErr.Error())
	}
	if err := checkBackupPlace(b.Dir); err != nil {
		// Its ledger gets no lines (appendToLedger) and restore refuses
		// it: say so where the operator looks, or it reads as sound.
		inf.Note = joinNotes(inf.Note, err.Error()+": its deletions are owed to it and restore refuses it")
	}
	return inf
}

// state is the state of the backup b, whose directory is there, and what
// is wrong with it (verify: check each file's checksum).
func (bk *Backups) state(ctx context.Context, b backupEntry, expired, taking, verify bool) (state, note string) {
	if taking {
		return BackupBeingTaken, ""
	}
	m, err := readManifestOf(b.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return BackupIncomplete, "no " + ManifestFile + ": a backup that stopped before its end (restore refuses it); remove it once looked at"
	case err != nil:
		return BackupDamagedManifest, err.Error() + " (restore refuses it)"
	case expired || bk.pastRetention(b.TakenAt):
		return BackupPastRetention, "past retention: 'admin backups prune' removes it"
	}
	damage, err := backupDamage(ctx, b.Dir, m, verify)
	switch {
	case err != nil:
		return BackupDamaged, "its files cannot be read: " + pathless(err).Error() + " (restore refuses it)"
	case damage != "":
		return BackupDamaged, damage + " (restore refuses it)"
	}
	return BackupComplete, ""
}

// readManifestOf reads and decodes dir's manifest: an error wrapping
// fs.ErrNotExist when there is none, another when it cannot be read, does
// not decode or has no taken_at. Its errors name the file, not dir.
func readManifestOf(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("%s cannot be read: %w", ManifestFile, pathless(err))
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil || m.Format < 1 || m.TakenAt.IsZero() {
		return nil, fmt.Errorf("%s does not decode as a coupond backup manifest", ManifestFile)
	}
	return &m, nil
}

// countLedger counts the deletions of dir's ledger: its lines that
// decode, each deletion once (the request and the worker both write it).
// Its error says the ledger cannot be read, or holds lines that do not
// decode (a torn last line is not one: its deletion was not
// acknowledged).
func countLedger(dir string) (deletions, tenants int, err error) {
	data, err := os.ReadFile(filepath.Join(dir, ledgerFile))
	if err != nil {
		return 0, 0, fmt.Errorf("deletion ledger cannot be read: %w", pathless(err))
	}
	entries, damaged, _ := parseLedger(data)
	seen := make(map[ledgerDeletion]bool, len(entries))
	for _, l := range entries {
		k := ledgerDeletionOf(l)
		if !seen[k] && l.Kind == LedgerTenant {
			tenants++
		}
		seen[k] = true
	}
	if len(damaged) > 0 {
		return len(seen), tenants, fmt.Errorf("deletion ledger: %d damaged lines (restore refuses it)", len(damaged))
	}
	return len(seen), tenants, nil
}

// ledgerDeletion names one deletion among ledger and owed lines: a deletion
// is written to a ledger (or owed) at its request and again by the worker
// before it erases anything, so a ledger holds it twice; the listing
// counts deletions, not lines.
type ledgerDeletion struct {
	tenant, hash string
	requestedAt  int64 // UnixNano
}

// ledgerDeletionOf is the ledgerDeletion of the ledger line l.
func ledgerDeletionOf(l LedgerEntry) ledgerDeletion {
	return ledgerDeletion{tenant: l.Tenant, hash: l.Hash, requestedAt: l.RequestedAt.UnixNano()}
}

// joinNotes joins two notes of a BackupInfo.
func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "; " + b
}

// The outcomes of Prune for one backup past retention.
const (
	PruneRemoved      = "removed"      // its directory and its registration are gone
	PruneUnregistered = "unregistered" // its registration is gone; its directory was not there, or is a backup within retention now
	PruneLeft         = "left"         // left in place and registered: Reason says why
	PruneFailed       = "failed"       // its removal failed: Reason says how; still registered
)

// Pruned is what Prune did (or, dry run, would do) with one backup past
// retention; its times are UTC.
type Pruned struct {
	Dir       string    `json:"dir"`
	TakenAt   time.Time `json:"taken_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Outcome   string    `json:"outcome"` // one of the Prune* outcomes
	Bytes     int64     `json:"bytes"`   // freed (dry run: to be freed)
	Reason    string    `json:"reason,omitempty"`
}

// Prune removes the backups past retention: their directories and then
// their registrations. A directory that is not there is only
// unregistered; one without a manifest that decodes and says it is past
// retention (an interrupted backup, or another directory) is reported
// and left alone, as is a symbolic link (Prune removes only what the
// registered path itself holds); one a later backup registered again is
// only unregistered (its old registration). A backup
// within retention is never touched. With dryRun it changes nothing and
// reports what it would do (reading a damaged registry's copy, as List).
//
// Deletions never race a removal: the backups past retention are first
// moved out of the registry's list that Ledger feeds, under the registry
// lock, so that no ledger is appended to from then on; each directory is
// then renamed aside and removed with the lock released (deletions and
// backups go on meanwhile), and only its registration is dropped at the
// end, from the registry as read again under the lock, so that what they
// changed meanwhile is kept. An error (the registry cannot be read or
// written) means nothing, or not every registration, was dropped; a
// backup it could not remove is a Pruned with PruneFailed, not an error.
func (bk *Backups) Prune(dryRun bool) ([]Pruned, error) {
	bk.pruneMu.Lock()
	defer bk.pruneMu.Unlock()
	expired, registered, err := bk.pruneCandidates(dryRun)
	if err != nil {
		return nil, err
	}
	out := []Pruned{}
	done := map[string]bool{}
	for _, b := range expired {
		p := bk.pruneOne(b, registered[b.Dir], dryRun)
		if !dryRun && (p.Outcome == PruneRemoved || p.Outcome == PruneUnregistered) {
			done[b.Dir] = true
		}
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TakenAt.Before(out[j].TakenAt) })
	if len(done) == 0 {
		return out, nil
	}
	return out, bk.updateRegistry(func(reg *backupRegistry) bool {
		reg.Expired = slices.DeleteFunc(reg.Expired, func(b backupEntry) bool { return done[b.Dir] })
		return true
	})
}

// pruneCandidates returns, under the registry lock, the backups past
// retention (after moving those of the list Ledger feeds to Expired and
// saving that, unless dryRun) and the directories still registered
// within retention.
func (bk *Backups) pruneCandidates(dryRun bool) (expired []backupEntry, registered map[string]bool, err error) {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if dryRun {
		// A damaged registry is rebuilt by Prune, from its copy first;
		// one that cannot be read stops it.
		reg, regErr, fromCopy := bk.peekRegistry()
		if unreadable := (*UnreadableRegistryError)(nil); errors.As(regErr, &unreadable) || (regErr != nil && !fromCopy) {
			return nil, nil, fmt.Errorf("backup registry: %w", regErr)
		}
		kept, gone := bk.splitExpired(reg.Backups)
		return append(slices.Clone(reg.Expired), gone...), dirsOf(kept), nil
	}
	reg, err := bk.loadRegistry()
	if err != nil {
		return nil, nil, fmt.Errorf("backup registry: %w", err)
	}
	if bk.dropExpired(reg) {
		if err := bk.saveRegistry(reg); err != nil {
			return nil, nil, fmt.Errorf("backup registry: %w", err)
		}
	}
	return slices.Clone(reg.Expired), dirsOf(reg.Backups), nil
}

// dirsOf is the set of the directories of backups.
func dirsOf(backups []backupEntry) map[string]bool {
	dirs := map[string]bool{}
	for _, b := range backups {
		dirs[b.Dir] = true
	}
	return dirs
}

// tombOf is where Prune renames the backup dir before removing it: a
// backup taken into dir meanwhile (it must be empty) cannot be mixed up
// with what is being removed, and one stopped mid-removal leaves a name
// the next Prune recognises.
func tombOf(dir string) string {
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".coupond-pruning")
}

// pruneOne removes (dry run: checks) the expired backup b; registered:
// a backup within retention has its directory.
func (bk *Backups) pruneOne(b backupEntry, registered, dryRun bool) Pruned {
	p := Pruned{Dir: b.Dir, TakenAt: b.TakenAt.UTC(), ExpiresAt: b.TakenAt.Add(BackupRetention).UTC()}
	tomb := tombOf(b.Dir)
	if registered {
		p.Outcome, p.Reason = PruneUnregistered, "a backup within retention was taken into this directory since: it stays, only the old registration goes"
		return p
	}
	fi, err := os.Lstat(b.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		p.Outcome, p.Reason = PruneUnregistered, "directory not there"
		p.Bytes, _ = dirSizeFiles(tomb)
		if _, err := os.Lstat(tomb); err == nil && !dryRun {
			return bk.removeTomb(p, tomb) // a Prune stopped mid-removal
		}
		return p
	}
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// Renaming and removing it would take the link and leave the
		// backup it points to, unregistered, past retention.
		p.Outcome, p.Reason = PruneLeft, "a symbolic link, not the backup's directory: remove the backup it points to and the link yourself"
		return p
	}
	m, err := readManifestOf(b.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		p.Outcome, p.Reason = PruneLeft, "not a complete coupond backup: no "+ManifestFile+"; remove it yourself once looked at"
		return p
	case err != nil:
		p.Outcome, p.Reason = PruneLeft, err.Error()+"; remove it yourself once looked at"
		return p
	case !bk.pastRetention(m.TakenAt):
		p.Outcome, p.Reason = PruneLeft, "its "+ManifestFile+" says it was taken at "+m.TakenAt.UTC().Format(time.RFC3339)+", within retention"
		return p
	}
	p.Outcome = PruneRemoved
	p.Bytes, _ = dirSize(b.Dir)
	if dryRun {
		return p
	}
	if bk.beforeRemove != nil {
		bk.beforeRemove(b.Dir)
	}
	if err := os.RemoveAll(tomb); err != nil { // one a stopped Prune left
		p.Outcome, p.Reason = PruneFailed, fmt.Sprintf("%s, left by an earlier prune, cannot be removed: %v", tomb, pathless(err))
		return p
	}
	if err := os.Rename(b.Dir, tomb); err != nil {
		p.Outcome, p.Reason = PruneFailed, fmt.Sprintf("cannot be moved aside to %s for removal: %v", filepath.Base(tomb), pathless(err))
		return p
	}
	return bk.removeTomb(p, tomb)
}

// removeTomb removes tomb, what Prune renamed the backup of p to, and
// logs it.
func (bk *Backups) removeTomb(p Pruned, tomb string) Pruned {
	if err := os.RemoveAll(tomb); err != nil {
		p.Outcome, p.Reason = PruneFailed, fmt.Sprintf("moved aside to %s, whose removal failed: %v; the next prune retries", tomb, pathless(err))
		return p
	}
	bk.log.Info().Str("backup", p.Dir).Time("taken_at", p.TakenAt).Int64("bytes", p.Bytes).Msg("backup past retention removed")
	return p
}
