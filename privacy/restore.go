package privacy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/coupond/coupond/atomicfile"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/store"
)

// OpenStaging builds, over the restored store db (not yet live), the
// Service that re-applies its deletions and the hooks it runs them with
// (offline: no ledger, batch data scrubbed even for queued jobs).
// resultsDir is the staging copy of the data dir's batch results: the
// staging services must read and change that one, never the live one,
// which the restore swaps it for only once it succeeds. cli provides it,
// since it wires the engine and the batch runner.
type OpenStaging func(ctx context.Context, db *store.DB, secrets *store.Secrets, resultsDir string) (*Service, DeletionHooks, error)

// RestoreResult is what "admin restore" reports.
type RestoreResult struct {
	From               string    `json:"from"`
	DataDir            string    `json:"data_dir"`
	TakenAt            time.Time `json:"taken_at"`
	DeletionsReapplied int       `json:"deletions_reapplied"`
	// TenantDeletionsReapplied counts the tenants deleted since the backup
	// that the restore deleted again (reapplyTenantDeletions).
	TenantDeletionsReapplied int  `json:"tenant_deletions_reapplied"`
	Replaced                 bool `json:"replaced_existing_store"`
	// LiveStore says what restore read of the deletions of the store it
	// replaced: "read", "partly read", "none" (there was none) or "does not
	// open".
	LiveStore string `json:"live_store"`
	// KeysRotatedSince names the signing keys ("token", "url") of the
	// backup's keys.json that differ from the data dir's (a rotation came
	// between them) and are in force now: a backup taken before a rotation
	// brings back the keys it replaced, leaked ones too, until admin keys
	// rotate replaces them once more.
	KeysRotatedSince []string `json:"keys_rotated_since,omitempty"`
}

// Restore brings the backup src back into the data dir (server stopped):
// the store is copied to a staging directory and the batch results to
// another, every deletion of the ledger, every one the backup's store had
// not completed and every one the store being replaced records that the
// backup had not completed (a deletion acknowledged after the backup whose
// worker had not run, or could not write the ledger) is applied there to
// completado, the credentials revoked or rotated since in the store being
// replaced are revoked or rotated there too (carryCredentials), and only
// then is src registered (so the restored store feeds its ledger from its
// first request) and are the staging store and results
// swapped in (and the backup's keys written when the data dir had none, damaged ones or keys rotated since: swapInWithKeys). Until that
// swap nothing of the data dir is changed: a restore that fails or stops
// before it leaves the store, results and keys as they were, and the
// registry too, but for src when it stops between the two (src then only
// receives deletions it may not need); a data dir the restore created is
// removed again. It holds the data dir's lock (LockDataDir) throughout. A replaced
// store that is missing or does not open does not stop the restore:
// progress says what was read.
func (bk *Backups) Restore(ctx context.Context, src string, open OpenStaging, progress io.Writer) (_ *RestoreResult, err error) {
	dataDir := bk.dataDir
	m, err := bk.readManifest(ctx, src)
	if err != nil {
		return nil, err
	}
	if err := checkTarget(dataDir, src); err != nil {
		return nil, err
	}
	if err := checkBackupPlace(src); err != nil {
		return nil, err
	}
	if err := checkBackupOwner(src); err != nil {
		return nil, err
	}
	_, statErr := os.Lstat(dataDir)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir %s: cannot create it: %w", dataDir, err)
	}
	lock, err := LockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && errors.Is(statErr, fs.ErrNotExist) {
			// The restore made the data dir: a failed one leaves none.
			os.RemoveAll(dataDir)
		}
		lock.Close()
	}()
	ledger, err := readLedger(filepath.Join(src, ledgerFile))
	if err != nil {
		return nil, err
	}
	// Deletions owed to src while it was missing (see Ledger) and not yet
	// delivered to its ledger.
	owed, err := bk.owedTo(src)
	if err != nil {
		return nil, err
	}
	ledger = append(ledger, owed...)
	secrets, err := backupKeys(dataDir, src)
	if err != nil {
		return nil, err
	}
	live, creds, liveState, err := readReplaced(dataDir, progress)
	if err != nil {
		return nil, err
	}
	rotated := rotatedKeys(dataDir, secrets)
	n, err := stage(ctx, dataDir, src, secrets, ledger, live, creds, open, progress)
	if err != nil {
		removeStaging(dataDir)
		return nil, err
	}
	// The restored installation keeps feeding this backup's ledger, and
	// those of its siblings: they are registered before the restored store
	// can serve, so a customer deleted there never misses a ledger (a
	// registry that cannot be written stops the restore here, with the data
	// dir as it was).
	if err := bk.updateRegistry(func(reg *backupRegistry) bool {
		return bk.registerRestored(reg, src, m.TakenAt)
	}); err != nil {
		removeStaging(dataDir)
		return nil, fmt.Errorf("backup registry: %w", err)
	}
	replaced, err := swapInWithKeys(dataDir, src)
	if err != nil {
		return nil, err
	}
	res := &RestoreResult{From: src, DataDir: dataDir, TakenAt: m.TakenAt, DeletionsReapplied: n.customers, TenantDeletionsReapplied: n.tenants, Replaced: replaced, LiveStore: liveState}
	if rotated != nil {
		res.KeysRotatedSince = settleRestoredKeys(dataDir, secrets, rotated, progress)
	}
	fmt.Fprintf(progress, "restore: done\n")
	return res, nil
}

// settleRestoredKeys ends a restore that put in force keys other than the
// data dir's, a rotation having come between the backup and the store it
// replaced (rotated: the data dir's keys before the restore; secrets: the
// backup's, now in keys.json). The restored store still accepts the
// rotated keys too (AcceptSecrets: a crash before keys.json was written
// leaves them there), which its next open settled as if a rotation had
// been cut short, logging a warning that sent the operator after a
// rotation that never stopped; settled here, the store takes the backup's
// keys alone. A store that does not open is left to its next open, which
// settles it the same way. It says which keys changed and returns their
// names: a backup taken before a rotation brings back the keys it
// replaced, and whoever holds those (the leak a rotation answers) can sign
// with them again until they are rotated once more.
func settleRestoredKeys(dataDir string, secrets, rotated *store.Secrets, progress io.Writer) []string {
	if db, err := store.Open(filepath.Join(dataDir, "db"), nil); err == nil {
		_ = db.CheckSecrets(secrets, filepath.Join(dataDir, store.SecretsFile)) // failed: the next open settles it
		_ = db.Close()
	}
	var names []string
	if !bytes.Equal(rotated.Token, secrets.Token) {
		names = append(names, "token")
	}
	if !bytes.Equal(rotated.URL, secrets.URL) {
		names = append(names, "url")
	}
	fmt.Fprintf(progress, "restore: the backup's %s key(s) are not those the data dir held (a rotation came between them) and are in force now: "+
		"if the backup's are keys rotated out after a leak, rotate them again (coupond admin keys rotate %s)\n",
		strings.Join(names, " and "), strings.Join(names, " "))
	return names
}

// registerRestored adds to reg, when not there yet, the restored backup
// src and every backup of the same installation (store.SameInstallation) beside
// it still within retention: taken before or after src, they hold the
// customers of the restored store too, and a backups.json restored onto a
// new machine, or one that lost them, would leave their ledgers unfed. A
// sibling being taken (no manifest yet) counts as taken now. It reports
// whether it added any.
func (bk *Backups) registerRestored(reg *backupRegistry, src string, takenAt time.Time) bool {
	found := map[string]backupEntry{src: {Dir: src, TakenAt: takenAt, Complete: true}}
	if keys, err := os.ReadFile(filepath.Join(src, store.SecretsFile)); err == nil {
		bk.addSiblings(found, keys)
	}
	for _, b := range reg.Backups {
		delete(found, b.Dir)
	}
	var added []backupEntry
	for _, b := range found {
		if bk.now().Sub(b.TakenAt) <= BackupRetention {
			added = append(added, b)
		}
	}
	sort.Slice(added, func(i, j int) bool {
		return added[i].TakenAt.Before(added[j].TakenAt) || (added[i].TakenAt.Equal(added[j].TakenAt) && added[i].Dir < added[j].Dir)
	})
	reg.Backups = append(reg.Backups, added...)
	return len(added) > 0
}

// removeStaging removes the staging store and results of a restore that
// stops before its swap.
func removeStaging(dataDir string) {
	os.RemoveAll(filepath.Join(dataDir, restoringDir))
	os.RemoveAll(filepath.Join(dataDir, restoringResults))
}

// reapplied counts the deletions a restore applied again: customers' and
// tenants'.
type reapplied struct{ customers, tenants int }

// stage builds the staging store (a copy of src's) and the staging results
// (a copy of the live ones) in dataDir and re-applies there the deletions and
// the credentials' revocations and rotations (creds: carryCredentials). It
// returns how many deletions it applied.
func stage(ctx context.Context, dataDir, src string, secrets *store.Secrets, ledger []LedgerEntry, live []liveDeletion,
	creds []*store.Credential, open OpenStaging, progress io.Writer) (reapplied, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return reapplied{}, err
	}
	staging := filepath.Join(dataDir, restoringDir)
	if err := os.RemoveAll(staging); err != nil {
		return reapplied{}, err
	}
	fmt.Fprintf(progress, "restore: copying %s\n", filepath.Join(src, "db"))
	if err := copyTree(filepath.Join(src, "db"), staging, progress); err != nil {
		return reapplied{}, err
	}
	results, err := stageResults(dataDir)
	if err != nil {
		return reapplied{}, err
	}
	n, err := amendStaging(ctx, staging, results, secrets, ledger, live, creds, open, progress)
	if err != nil {
		return reapplied{}, err
	}
	return n, rotateManifest(staging)
}

// amendStaging opens the staging store once and re-applies there the
// deletions (reapplyDeletions) and the revocations and rotations
// (keepRevocations); it returns how many deletions it applied.
func amendStaging(ctx context.Context, staging, results string, secrets *store.Secrets, ledger []LedgerEntry, live []liveDeletion,
	creds []*store.Credential, open OpenStaging, progress io.Writer) (reapplied, error) {
	db, err := store.Open(staging, nil)
	if err != nil {
		return reapplied{}, err
	}
	defer db.Close()
	if cur := rotatedKeys(filepath.Dir(staging), secrets); cur != nil {
		if err := db.AcceptSecrets(cur); err != nil {
			return reapplied{}, err
		}
	}
	n, err := reapplyDeletions(ctx, db, results, secrets, ledger, live, open, progress)
	if err != nil {
		return reapplied{}, err
	}
	return n, keepRevocations(db, creds, progress)
}

// readManifest reads src's manifest and refuses, before anything is
// touched, an incomplete backup, one made by a newer coupond, one past
// retention and one whose db no longer matches its manifest (checkFiles).
func (bk *Backups) readManifest(ctx context.Context, src string) (*Manifest, error) {
	var m Manifest
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist: give --from a backup directory made by admin backup (admin backups lists them)", src)
	}
	data, err := os.ReadFile(filepath.Join(src, ManifestFile))
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return nil, fmt.Errorf("%s is not a complete backup: it has no %s (a backup that stopped, or not a backup directory)", src, ManifestFile)
	case err != nil:
		return nil, fmt.Errorf("backup %s cannot be read: %w", src, err)
	}
	if err := json.Unmarshal(data, &m); err != nil || m.Format < 1 {
		return nil, fmt.Errorf("%s/%s: not a coupond backup manifest", src, ManifestFile)
	}
	if m.Format > backupFormat {
		return nil, fmt.Errorf("%s was made by a newer coupond (backup format %d; this one reads format %d): restore it with that version or later",
			src, m.Format, backupFormat)
	}
	if age := bk.now().Sub(m.TakenAt); age > BackupRetention {
		return nil, fmt.Errorf("backup taken %s is past the %d-day retention: it no longer receives customer deletions, so it cannot be restored",
			m.TakenAt.Format(time.RFC3339), int(BackupRetention/(24*time.Hour)))
	}
	if err := checkFiles(ctx, src, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// checkFiles refuses a backup whose db differs from its manifest: nothing
// writes into a backup's store after its manifest, so a file missing,
// added, cut short or changed since is a damaged copy. A manifest with
// checksums (Manifest.SHA256) has each file checked; an older one only
// the total size and count.
func checkFiles(ctx context.Context, src string, m *Manifest) error {
	damage, err := backupDamage(ctx, src, m, true)
	if err != nil {
		return fmt.Errorf("backup %s cannot be read: %w", src, err)
	}
	if damage != "" {
		return fmt.Errorf("%s is damaged: %s (restore another backup)", src, damage)
	}
	return nil
}

// backupDamage says how the backup in dir differs from its manifest m
// ("" if it does not): its db (dbDamage) and, with sums, its keys.json
// (when m has their checksum). err: a file could not be read, or ctx
// ended while the files were read (their checksums, between two files).
func backupDamage(ctx context.Context, dir string, m *Manifest, sums bool) (damage string, err error) {
	damage, err = dbDamage(ctx, filepath.Join(dir, "db"), m, sums)
	if damage != "" || err != nil || !sums || m.KeysSHA256 == "" {
		return damage, err
	}
	got, err := fileDigest(filepath.Join(dir, store.SecretsFile))
	if err != nil {
		return "", err
	}
	if got != m.KeysSHA256 {
		return store.SecretsFile + " does not match the checksum its manifest lists", nil
	}
	return "", nil
}

// dbDamage says how the backup store db differs from its manifest m ("" if
// it does not): by its files' total size and count and, with sums, by each
// file's checksum (when m has them). err: a file could not be read.
func dbDamage(ctx context.Context, db string, m *Manifest, sums bool) (damage string, err error) {
	if size, files := dirSizeFiles(db); size != m.Bytes || files != m.Files {
		return fmt.Sprintf("its db holds %d files, %d bytes; its manifest lists %d files, %d bytes", files, size, m.Files, m.Bytes), nil
	}
	if !sums || m.SHA256 == nil {
		return "", nil
	}
	got, err := digests(ctx, db)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(m.SHA256)+len(got))
	for name := range m.SHA256 {
		names = append(names, name)
	}
	for name := range got {
		if _, ok := m.SHA256[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if got[name] != m.SHA256[name] {
			return fmt.Sprintf("db/%s does not match the checksum its manifest lists", name), nil
		}
	}
	return "", nil
}

// checkTarget refuses a restore of src into dataDir when neither lies
// apart from the other (the restore would replace the backup's own files
// or write into it) or when dataDir is there, not empty and not a coupond
// data dir (a mistyped path such as the parent of the data dir): restore
// goes into an empty or missing directory, or replaces a data dir.
func checkTarget(dataDir, src string) error {
	d, b := resolvedPath(dataDir), resolvedPath(src)
	if within(d, b) || within(b, d) {
		return fmt.Errorf("--data-dir %s and the backup %s lie one inside the other: restore into another directory", dataDir, src)
	}
	entries, err := os.ReadDir(dataDir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--data-dir %s: %w", dataDir, err)
	}
	if HoldsCoupondData(dataDir) {
		return nil
	}
	return fmt.Errorf("--data-dir %s is not empty and is not a coupond data dir (no db, no keys.json): restore into an empty or missing directory, or into the data dir to replace", dataDir)
}

// checkBackupOwner refuses the backup src when another user could have
// changed it: src, or anything in it, belongs to another user than this
// one or root, or is writable by group or others. Whoever can write there can plant keys
// (whoever knows keys.json signs tokens for every credential) or a store
// holding a credential of theirs, and rewrite the manifest's checksums to
// match; admin backup refuses to write into another user's directory
// (Backups.prepareDir), and this is the restore's half. Symbolic links in
// src are taken as they are, not followed.
func checkBackupOwner(src string) error {
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("backup %s cannot be read: %w", src, err)
	}
	uid := os.Getuid()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("backup %s cannot be read: %w", src, err)
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("backup %s cannot be read: %w", src, err)
		}
		if owner, ok := store.FileOwner(info); ok && owner != uid && owner != 0 { // root could change anything anyway (store.SwappableBy)
			return fmt.Errorf("backup %s: %s belongs to another user (uid %d), who could have changed the backup (its keys, its store): "+
				"refusing to restore it; restore a backup this user owns", src, path, owner)
		}
		if info.Mode().Type() != fs.ModeSymlink && info.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("backup %s: %s is writable by group or others (mode %04o), who could have changed the backup (its keys, its store): "+
				"refusing to restore it; check that nobody did, then run: chmod -R go-w %s", src, path, info.Mode().Perm(), src)
		}
		return nil
	})
}

// HoldsCoupondData reports whether dir holds one of the names that mark a
// coupond data dir (or one a restore ran in): its store, its keys, its
// lock, its backup list or its batch results. A directory that holds none
// of them is not a data dir, whatever else it holds.
func HoldsCoupondData(dir string) bool {
	for _, name := range []string{"db", restoringDir, replacedDir, store.SecretsFile, lockFile, backupsFile, registryCopy, "results"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// within reports whether path is dir or lies inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// backupKeys loads the keys of the backup src, refusing them when dataDir
// holds another installation's (store.SameInstallation: keys of this one
// rotated since the backup are not another's). A keys.json of dataDir
// that does not decode (damaged) names no installation: it is no reason to
// refuse, and installKeys puts the backup's in its place, as serve's
// refusal of it advises ("restore that backup"). It writes nothing.
func backupKeys(dataDir, src string) (*store.Secrets, error) {
	keys, err := os.ReadFile(filepath.Join(src, store.SecretsFile))
	if err != nil {
		return nil, fmt.Errorf("backup keys: %w", err)
	}
	// Decoded first: damaged keys of a backup whose manifest has no
	// checksum of them were "another installation's" beside the data dir's,
	// and elsewhere the store's advice to restore that very backup.
	secrets, err := store.LoadSecrets(src)
	if err != nil {
		return nil, fmt.Errorf("%s is damaged: its %s does not decode (restore another backup)", src, store.SecretsFile)
	}
	cur, err := os.ReadFile(filepath.Join(dataDir, store.SecretsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	case store.SameInstallation(cur, keys):
	case !keysDamaged(cur):
		return nil, fmt.Errorf("the backup's keys.json differs from %s: it comes from another installation", filepath.Join(dataDir, store.SecretsFile))
	}
	return secrets, nil
}

// keysDamaged reports whether keys, the bytes of a keys.json, do not
// decode (none included).
func keysDamaged(keys []byte) bool {
	_, err := store.ParseSecrets(keys, store.SecretsFile)
	return err != nil
}

// readKeys is the bytes of dataDir's keys.json; nil when it cannot be read.
func readKeys(dataDir string) []byte {
	keys, _ := os.ReadFile(filepath.Join(dataDir, store.SecretsFile))
	return keys
}

// rotatedKeys is the keys of dataDir when they decode and are not backup
// (the backup's): a rotation since the backup replaced some; nil otherwise.
func rotatedKeys(dataDir string, backup *store.Secrets) *store.Secrets {
	cur, err := store.ParseSecrets(readKeys(dataDir), store.SecretsFile)
	if err != nil || bytes.Equal(cur.Token, backup.Token) && bytes.Equal(cur.URL, backup.URL) {
		return nil
	}
	return cur
}

// installKeys puts the backup's keys.json into dataDir unless it holds the
// same bytes already: when it has none or a damaged one, and when its keys
// were rotated since the backup (backupKeys checked that they are of the
// same installation), since the restored store was written with the
// backup's.
func installKeys(dataDir, src string) error {
	path := filepath.Join(dataDir, store.SecretsFile)
	keys, err := os.ReadFile(filepath.Join(src, store.SecretsFile))
	if err != nil {
		return fmt.Errorf("backup keys: %w", err)
	}
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(bytes.TrimSpace(cur), bytes.TrimSpace(keys)) {
		return nil
	}
	return atomicfile.WriteBytes(path, 0o600, keys)
}

// Staging and replaced stores and batch results of a restore, beside
// dataDir's "db" and "results".
const (
	restoringDir     = "db.restoring"
	replacedDir      = "db.replaced"
	restoringResults = "results.restoring"
	replacedResults  = "results.replaced"
)

// lockFile, in the data dir, is locked (LockDataDir) by a restore for its
// whole run and by every process that opens the data dir for as long as
// it has it open: a restore never runs beside serve or an admin command,
// and nothing takes a running restore's staging copies for leftovers.
const lockFile = "coupond.lock"

// DataDirLockFile is the name, in the data dir, of the file LockDataDir
// locks: serve reads from it who holds the lock.
const DataDirLockFile = lockFile

// LockDataDir locks dataDir (lockFile) until the returned Closer is
// closed. It fails, naming the dir, while another process (serve, an admin
// command, a restore) or another holder in this one has it locked, and,
// saying so rather than "in use", when its lock file cannot be opened.
func LockDataDir(dataDir string) (io.Closer, error) {
	l, err := store.LockFile(filepath.Join(dataDir, lockFile))
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		// The lock file cannot be opened (no permission, a read-only
		// disk): nothing says another process holds it.
		return nil, fmt.Errorf("data dir %s cannot be used: %w", dataDir, err)
	}
	if err != nil {
		return nil, &inUseError{dataDir: dataDir, err: err}
	}
	return l, nil
}

// ErrDataDirInUse matches (errors.Is) LockDataDir's error when another
// process holds the data dir's lock, as opposed to a lock file that cannot
// be opened.
var ErrDataDirInUse = errors.New("data dir in use by another coupond")

// inUseError is LockDataDir's error for a lock another process holds.
type inUseError struct {
	dataDir string
	err     error
}

func (e *inUseError) Error() string {
	return fmt.Sprintf("data dir %s is in use by another coupond (serve, an admin command or a restore): %v", e.dataDir, e.err)
}
func (e *inUseError) Unwrap() error        { return e.err }
func (e *inUseError) Is(target error) bool { return target == ErrDataDirInUse }

// RecoverInterrupted looks at what a restore that stopped before it
// finished (a crash, a kill) left in dataDir, whose lock (LockDataDir) the
// caller holds, so no restore runs there. It refuses a data dir the restore
// stopped in before the store was in place (checkInterrupted). With the
// store in place, the staging and replaced stores and results left there
// are removed: they hold customers' data, maybe of customers deleted
// since, which nothing else would remove until another restore. It returns
// the names of those it removed.
func RecoverInterrupted(dataDir string) (removed []string, err error) {
	if err := checkInterrupted(dataDir); err != nil {
		return nil, err
	}
	for _, left := range []string{restoringDir, restoringResults, replacedDir, replacedResults} {
		path := filepath.Join(dataDir, left)
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			return removed, fmt.Errorf("%s, left by a restore that stopped: %w", path, err)
		}
		removed = append(removed, left)
	}
	if len(removed) == 0 {
		return nil, nil
	}
	return removed, atomicfile.SyncDir(dataDir)
}

// checkInterrupted refuses a data dir a restore stopped in before its
// store was in place: "db" is missing and a staging or replaced store is
// there. Opened as it is, the missing store would be created empty and
// the service would start with no data. The error says how to go back
// with what is there (goBack).
func checkInterrupted(dataDir string) error {
	if _, err := os.Stat(filepath.Join(dataDir, "db")); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, left := range []string{restoringDir, replacedDir} {
		if _, err := os.Stat(filepath.Join(dataDir, left)); err == nil {
			return fmt.Errorf("data dir %s: a restore stopped before it finished (%s is there, db is not): run the same "+
				"'coupond admin restore --from BACKUP' again; %s", dataDir, left, goBack(dataDir))
		}
	}
	return nil
}

// goBack is the way back to the data dir as it was before a restore that
// stopped with no db: the store it replaced moved back, or, when there is
// none (a restore into a new data dir that stopped while copying, whose
// db.replaced there is no telling the operator to move), its copy
// removed.
func goBack(dataDir string) string {
	replaced := filepath.Join(dataDir, replacedDir)
	if _, err := os.Stat(replaced); err == nil {
		return fmt.Sprintf("to keep the store as it was before that restore instead, move %s back to db and, if %s is there, "+
			"move it back to results (removing the results there)", replaced, filepath.Join(dataDir, replacedResults))
	}
	return fmt.Sprintf("it replaced no store (the data dir had none): to start with no data instead, remove %s",
		filepath.Join(dataDir, restoringDir))
}

// liveResults is the results dir a restore copies: dataDir's "results", or
// the "results.replaced" that a restore stopped between its renames left.
func liveResults(dataDir string) string {
	dir := filepath.Join(dataDir, "results")
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return filepath.Join(dataDir, replacedResults)
	}
	return dir
}

// stageResults makes the staging results dir a copy of the live one
// (without temporary files): hard links where the file system allows
// them, which is safe since result files are only ever replaced (written
// aside and renamed) or removed, never changed in place. It returns the
// staging dir.
func stageResults(dataDir string) (string, error) {
	staging := filepath.Join(dataDir, restoringResults)
	if err := os.RemoveAll(staging); err != nil {
		return "", err
	}
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return "", err
	}
	src := liveResults(dataDir)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == src {
			return nil // no results yet
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(staging, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case !d.Type().IsRegular() || strings.HasSuffix(path, atomicfile.TmpSuffix):
			return nil
		case os.Link(path, target) == nil:
			return nil
		}
		_, err = copyFile(path, target)
		return err
	})
	if err != nil {
		return "", err
	}
	return staging, syncTree(staging)
}

// swapInWithKeys swaps the staging store and results in (swapIn) and puts
// the backup src's keys.json in place (installKeys). A data dir without
// keys (or with damaged ones) gets the backup's first: its store is
// refused without them. One whose keys were rotated since the backup gets
// the backup's once the backup's store is in, which accepts either set
// until then (amendStaging): a crash in between leaves a data dir that
// opens.
func swapInWithKeys(dataDir, src string) (replaced bool, err error) {
	early := keysDamaged(readKeys(dataDir))
	if early {
		if err := installKeys(dataDir, src); err != nil {
			return false, err
		}
	}
	if replaced, err = swapIn(dataDir); err != nil || early {
		return replaced, err
	}
	return replaced, installKeys(dataDir, src)
}

// swapIn makes the staging store and results the live ones of dataDir,
// reporting whether it replaced a store.
//
// The results go in before the store: while "db" is missing (between the
// renames) RecoverInterrupted refuses the dir, and once it is there its
// results are too. The restore run again after a crash in between reads
// the deletions of db.replaced and the results of results.replaced (or of
// the results already swapped in), swaps in and removes what is left.
func swapIn(dataDir string) (replaced bool, err error) {
	live, old := filepath.Join(dataDir, "db"), filepath.Join(dataDir, replacedDir)
	results, oldResults := filepath.Join(dataDir, "results"), filepath.Join(dataDir, replacedResults)
	if _, err := os.Stat(live); err == nil {
		replaced = true
		if err := os.RemoveAll(old); err != nil {
			return replaced, err
		}
		if err := os.Rename(live, old); err != nil {
			return replaced, err
		}
	}
	if _, err := os.Stat(results); err == nil {
		if err := os.RemoveAll(oldResults); err != nil {
			return replaced, err
		}
		if err := os.Rename(results, oldResults); err != nil {
			return replaced, err
		}
	}
	if err := os.Rename(filepath.Join(dataDir, restoringResults), results); err != nil {
		return replaced, err
	}
	if err := os.Rename(filepath.Join(dataDir, restoringDir), live); err != nil {
		return replaced, err
	}
	if err := atomicfile.SyncDir(dataDir); err != nil {
		return replaced, err
	}
	for _, dir := range []string{old, oldResults} {
		if err := os.RemoveAll(dir); err != nil {
			return replaced, err
		}
	}
	return replaced, atomicfile.SyncDir(dataDir)
}

func readLedger(path string) ([]LedgerEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("backup deletion ledger: %w", err)
	}
	out, damaged, err := parseLedger(data)
	if len(damaged) > 0 {
		return nil, fmt.Errorf("%s line %d: %w", path, damaged[0], err)
	}
	return out, nil
}

// parseLedger decodes a ledger's lines: its entries, and the numbers
// (from 1) of the lines that do not decode with the first one's error. A
// torn last line is not one: its deletion was not acknowledged as
// ledgered.
func parseLedger(data []byte) (entries []LedgerEntry, damaged []int, firstErr error) {
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var l LedgerEntry
		if err := json.Unmarshal(line, &l); err != nil {
			if i < len(lines)-1 {
				damaged = append(damaged, i+1)
				firstErr = cmp.Or(firstErr, err)
			}
			continue
		}
		entries = append(entries, l)
	}
	return entries, damaged, firstErr
}

// liveDeletion is a deletion record of the store a restore replaces: a
// customer's (rec), or a tenant's tombstone (gone).
type liveDeletion struct {
	tenant string
	rec    DeletionRecord
	gone   *store.TenantDeletion
}

// readReplaced reads the deletion records and the credentials of the store
// a restore is about to replace: dataDir's "db", or the "db.replaced" that a
// restore stopped between its two renames left. That store may be missing
// or damaged (often why one restores): progress and state say what could
// and could not be read, and only a store in use by another process is an
// error. A record that does not decode stands, as everywhere, for a
// deletion still to do.
func readReplaced(dataDir string, progress io.Writer) (out []liveDeletion, creds []*store.Credential, state string, err error) {
	dir := filepath.Join(dataDir, "db")
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		dir = filepath.Join(dataDir, replacedDir)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(progress, "restore: no store in %s to read deletions from: the backup's own and its ledger's are re-applied; "+
			"credentials revoked or rotated since the backup are not known here either (a new machine): revoke or rotate them again\n", dataDir)
		return nil, nil, "none", nil
	}
	db, err := store.Open(dir, nil)
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
		return nil, nil, "", fmt.Errorf("the store in %s is in use (is coupond serve running?): %w", dir, err)
	}
	if err != nil {
		fmt.Fprintf(progress, "restore: WARNING: the store being replaced (%s) does not open (%v): deletions acknowledged there "+
			"since the backup are not read; the backup's own and its ledger's (written at each request) are re-applied. "+
			"Credentials revoked or rotated since the backup are not read either: revoke or rotate them again\n", dir, err)
		return nil, nil, "does not open", nil
	}
	defer db.Close()
	state = "read"
	for _, t := range db.Tenants() {
		lo, hi := store.DeletionSpan(t.ID)
		err := db.Scan(lo, hi, func(k, v []byte) error {
			hash, ok := store.ParseDeletionKey(t.ID, k)
			if !ok {
				return nil
			}
			var r DeletionRecord
			if json.Unmarshal(v, &r) != nil {
				r = DeletionRecord{Estado: DeletionScheduled}
			}
			r.Hash = hash
			out = append(out, liveDeletion{tenant: t.ID, rec: r})
			return nil
		})
		if err != nil {
			state = "partly read"
			fmt.Fprintf(progress, "restore: WARNING: tenant %s: the deletion records of the store being replaced could not all be read (%v)\n", t.ID, err)
		}
	}
	gone, err := db.TenantDeletions()
	if err != nil {
		state = "partly read"
		fmt.Fprintf(progress, "restore: WARNING: the tenant deletions of the store being replaced could not all be read (%v)\n", err)
	}
	for i := range gone {
		out = append(out, liveDeletion{tenant: gone[i].Tenant, gone: &gone[i]})
	}
	fmt.Fprintf(progress, "restore: %d deletion records read from the store being replaced (%s)\n", len(out), dir)
	return out, db.Credentials(""), state, nil
}

// keepRevocations makes sure the staging store gives back no access the
// operator cut since the backup was taken: it revokes and rotates its
// credentials as creds, those of the store being replaced, are
// (carryCredentials), and ends every console session and sign-in link the
// backup holds (one signed out since, "admin console logout --all", would
// otherwise sign in again; the operator signs in anew after a restore).
func keepRevocations(db *store.DB, creds []*store.Credential, progress io.Writer) error {
	if err := carryCredentials(db, creds, progress); err != nil {
		return err
	}
	b := db.NewBatch()
	defer b.Close()
	b.DeleteRange(store.ConsoleSessionSpan())
	b.DeleteRange(store.ConsoleLinkSpan())
	if err := b.Commit(); err != nil {
		return fmt.Errorf("ending console sessions: %w", err)
	}
	fmt.Fprintf(progress, "restore: console sessions and sign-in links of the backup ended: sign in again (coupond admin console login)\n")
	return nil
}

// carryCredentials applies to db's credentials the revocations and
// rotations that creds, those of the store being replaced, record since the
// backup was taken: a credential revoked there stays revoked, and one
// rotated later there keeps only the secrets it has there, so that a
// restore never brings back a secret the operator cut (a leaked one).
// Credentials the backup does not hold are left out, as is anything else of
// a credential (its abuse suspension is the abuse guard's).
func carryCredentials(db *store.DB, creds []*store.Credential, progress io.Writer) error {
	n := 0
	for _, live := range creds {
		c, ok := db.Credential(live.ClientID)
		if !ok || c.Tenant != live.Tenant || !laterCredential(c, live) {
			continue
		}
		_, err := db.UpdateCredential(live.ClientID, func(c *store.Credential) error {
			if live.Revoked && !c.Revoked {
				c.Revoked, c.RevokedAt = true, live.RevokedAt
			}
			if live.RotatedAt.After(c.RotatedAt) {
				c.SecretHash, c.PrevSecretHash, c.PrevUntil = live.SecretHash, live.PrevSecretHash, live.PrevUntil
				c.RotatedAt, c.SecretGen = live.RotatedAt, live.SecretGen
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("credential %s: %w", live.ClientID, err)
		}
		n++
	}
	what := "credentials keep"
	if n == 1 {
		what = "credential keeps"
	}
	fmt.Fprintf(progress, "restore: %d %s the revocation or rotation the store being replaced records\n", n, what)
	return nil
}

// laterCredential reports whether live, a credential of the store being
// replaced, was revoked or rotated after c, the backup's record of it.
func laterCredential(c, live *store.Credential) bool {
	return live.Revoked && !c.Revoked || live.RotatedAt.After(c.RotatedAt)
}

// reapplyDeletions serves db, the staging store, (with the staging results),
// schedules the deletions toReapply finds, and runs them to completado. It
// returns how many deletions it applied.
func reapplyDeletions(ctx context.Context, db *store.DB, results string, secrets *store.Secrets, ledger []LedgerEntry, live []liveDeletion,
	open OpenStaging, progress io.Writer) (reapplied, error) {
	svc, hooks, err := open(ctx, db, secrets, results)
	if err != nil {
		return reapplied{}, err
	}
	tenants, err := reapplyTenantDeletions(ctx, svc, db, ledger, live, hooks, progress)
	if err != nil {
		return reapplied{}, err
	}
	todo, err := toReapply(svc, db, ledger, live)
	if err != nil {
		return reapplied{}, err
	}
	for _, l := range todo {
		if _, err := svc.ScheduleDeletionByHash(l.Tenant, l.Hash, l.RequestedAt, l.ClientID); err != nil {
			return reapplied{}, err
		}
	}
	// A pass erases up to a thousand customers, then rewrites the store's
	// files that held them: 15 s for 330 customers of a year's store of
	// 730 MB, minutes for a larger one. It said nothing more until the
	// restore was done: a line a pass shows it moving.
	fmt.Fprintf(progress, "restore: re-applying %d customer deletions (each pass of up to %d rewrites the store's files that hold them)\n", len(todo), deletionBatch)
	for {
		st, err := svc.ProcessDeletions(ctx, hooks)
		if err != nil {
			return reapplied{}, fmt.Errorf("re-applying deletions: %w", err)
		}
		left, err := svc.PendingDeletions()
		if err != nil {
			return reapplied{}, err
		}
		// Counted from the queue: a pass's Completed also counts a job the
		// backup had queued for a customer scheduled again here.
		fmt.Fprintf(progress, "restore: %d/%d customer deletions re-applied\n", max(0, len(todo)-left), len(todo))
		if left == 0 {
			break
		}
		if st.Completed == 0 {
			return reapplied{}, fmt.Errorf("re-applying deletions: %d cannot complete", left)
		}
	}
	if err := reconcileResults(db, results); err != nil {
		return reapplied{}, err
	}
	return reapplied{customers: len(todo), tenants: tenants}, nil
}

// toReapply returns the deletions a restore applies to the restored store
// db (served by svc), the latest request per customer: those of the
// ledger, those db had not completed and those of live (the replaced
// store's). One that db holds completado, as requested then or later, is
// left out: it was done before the checkpoint, and what the customer sent
// after it (a returning customer) stays. That holds for a ledger entry
// too: the ledger is fed from the backup's registration, before its
// checkpoint.
func toReapply(svc *Service, db *store.DB, ledger []LedgerEntry, live []liveDeletion) (map[[2]string]LedgerEntry, error) {
	todo := map[[2]string]LedgerEntry{}
	add := func(l LedgerEntry) {
		if l.Kind == LedgerTenant {
			return // reapplyTenantDeletions
		}
		if _, ok := db.Tenant(l.Tenant); !ok {
			return // a tenant created after the backup: none of its data is in it
		}
		k := [2]string{l.Tenant, l.Hash}
		if old, ok := todo[k]; !ok || l.RequestedAt.After(old.RequestedAt) {
			todo[k] = l
		}
	}
	for _, l := range ledger {
		add(l)
	}
	for _, t := range db.Tenants() {
		recs, err := svc.Deletions(t.ID)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			add(LedgerEntry{Tenant: t.ID, Hash: r.Hash, RequestedAt: r.SolicitadoEn, ClientID: r.ClientID})
		}
	}
	for _, l := range live {
		if l.gone != nil {
			continue // reapplyTenantDeletions
		}
		add(LedgerEntry{Tenant: l.tenant, Hash: l.rec.Hash, RequestedAt: l.rec.SolicitadoEn, ClientID: l.rec.ClientID})
	}
	for k, l := range todo {
		done, err := svc.deletionByHash(l.Tenant, l.Hash)
		if err != nil {
			return nil, err
		}
		if done != nil && done.Estado == DeletionCompleted && !l.RequestedAt.IsZero() && !done.SolicitadoEn.Before(l.RequestedAt) {
			delete(todo, k)
		}
	}
	return todo, nil
}

// reconcileResults makes the results dir agree with the restored jobs.
// Result files are not part of a backup: a restored job whose file is not
// there says so (as after retention), and files of jobs the restored store
// does not know are removed, since no deletion would ever reach them.
func reconcileResults(db *store.DB, dir string) error {
	known := map[string]bool{}
	b := db.NewBatch()
	defer b.Close()
	for _, t := range db.Tenants() {
		lo, hi := store.JobSpan(t.ID)
		if err := db.Scan(lo, hi, func(k, v []byte) error {
			var j batch.Job
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			if j.Result == "" {
				return nil
			}
			path := filepath.Join(dir, j.Result)
			if _, err := os.Stat(path); err == nil {
				known[path] = true
				return nil
			}
			j.Result = ""
			j.Error = "archivo de resultados no incluido en el respaldo restaurado"
			return b.SetJSON(append([]byte(nil), k...), &j)
		}); err != nil {
			return err
		}
	}
	if !b.Empty() {
		if err := b.Commit(); err != nil {
			return err
		}
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && !known[path] {
			return os.Remove(path)
		}
		return nil
	})
}

// rotateManifest reopens the store twice, flushing each time. Pebble starts
// a new MANIFEST at the first edit after opening and keeps one previous
// one, so after two rounds no MANIFEST holds the file boundaries of before
// the deletions (sstable boundary keys may name a customer).
func rotateManifest(dir string) error {
	for i := 0; i < 2; i++ {
		db, err := store.Open(dir, nil)
		if err != nil {
			return err
		}
		if err := db.Flush(); err != nil {
			db.Close()
			return err
		}
		if err := db.Close(); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the regular files of src into dst (created), fsyncing
// each, with progress lines.
func copyTree(src, dst string, progress io.Writer) error {
	total, _ := dirSizeFiles(src)
	var done int64
	last := time.Now()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		n, err := copyFile(path, target)
		done += n
		if time.Since(last) > 250*time.Millisecond {
			fmt.Fprintf(progress, "restore: %s\n", progressBar(done, total))
			last = time.Now()
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "restore: %s\n", progressBar(done, max(total, 1)))
	return atomicfile.SyncDir(dst)
}

// copyFile copies the file src to dst (created, owner-only), synced, and
// returns how many bytes it copied.
func copyFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}
