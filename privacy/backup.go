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
//     (Backups.Ledger). Registration precedes the checkpoint, so a deletion
//     requested after a checkpoint reaches that backup's ledger; one
//     requested before it is in the checkpoint as a deletion record.
//   - "admin restore --from DIR" (Backups.Restore, server stopped) reads the
//     deletion records of the store it will replace (when there is one and
//     it opens: an acknowledged deletion the worker had not ledgered yet is
//     only there), copies DIR/db into a staging directory (and the live
//     batch results into another), opens it,
//     re-schedules every deletion of the ledger, every deletion the backup
//     holds as programado (a completado one is done, and what came after it
//     stays) and every deletion of the replaced store the backup does not
//     hold as completado, runs them all to completado (finding customers by
//     keyed hash), and only then swaps the staging store and results in.
//     Nothing is served from the restored store before every deletion is
//     applied, and a restore that fails before the swap leaves the data
//     dir as it was.
//   - Backups older than BackupRetention receive no more ledger entries and
//     restore refuses them: they can no longer be brought back, so they are
//     the operator's to destroy (they are outside the data dir).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
}

// NewBackups returns the Backups of dataDir; now is the real clock.
func NewBackups(dataDir string, now func() time.Time, log zerolog.Logger) *Backups {
	return &Backups{dataDir: dataDir, now: now, log: log}
}

// BackupRetention is how long a backup keeps receiving deletions and can be
// restored.
const BackupRetention = 30 * 24 * time.Hour

const (
	backupsFile  = "backups.json"    // in the data dir: the registered backups
	ledgerFile   = "deletions.jsonl" // in a backup dir: deletions after it was taken
	ManifestFile = "manifest.json"   // in a backup dir: written last
	backupFormat = 1
)

type backupEntry struct {
	Dir      string    `json:"dir"`
	TakenAt  time.Time `json:"taken_at"`
	Complete bool      `json:"complete"`
}

type backupRegistry struct {
	Backups []backupEntry `json:"backups"`
}

func (bk *Backups) loadRegistry() (*backupRegistry, error) {
	var r backupRegistry
	data, err := os.ReadFile(filepath.Join(bk.dataDir, backupsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &r, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", backupsFile, err)
	}
	return &r, nil
}

func (bk *Backups) saveRegistry(r *backupRegistry) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(bk.dataDir, backupsFile), 0o600, data)
}

// appendLedger appends one deletion to a backup's ledger, synced
// (atomicfile.Append, which first cuts off a torn last line: run into
// this one, it would make the ledger unreadable and the backup
// unrestorable).
func appendLedger(dir string, l LedgerEntry) error {
	line, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return atomicfile.Append(filepath.Join(dir, ledgerFile), 0o600, append(line, '\n'))
}

// Ledger records a deletion in every registered backup within retention
// (the DeletionHooks.Ledger of the live store). Backups past retention,
// and registered directories that no longer exist, are dropped from the
// registry.
func (bk *Backups) Ledger(l LedgerEntry) error {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	reg, err := bk.loadRegistry()
	if err != nil {
		return err
	}
	kept := reg.Backups[:0:0]
	for _, b := range reg.Backups {
		if bk.now().Sub(b.TakenAt) > BackupRetention {
			bk.log.Info().Str("backup", b.Dir).Msg("backup past retention: it receives no more deletions and restore refuses it")
			continue
		}
		if _, err := os.Stat(b.Dir); errors.Is(err, fs.ErrNotExist) {
			bk.log.Warn().Str("backup", b.Dir).Msg("registered backup directory is gone; forgotten")
			continue
		}
		if err := appendLedger(b.Dir, l); err != nil {
			return fmt.Errorf("backup %s: %w", b.Dir, err)
		}
		kept = append(kept, b)
	}
	if len(kept) != len(reg.Backups) {
		reg.Backups = kept
		return bk.saveRegistry(reg)
	}
	return nil
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
}

func (bk *Backups) Take(_ context.Context, db *store.DB, dir, version string, progress io.Writer) (*Manifest, error) {
	if err := bk.prepareDir(dir); err != nil {
		return nil, err
	}
	// The ledger and the registration come before the checkpoint: a deletion
	// the checkpoint misses is then in the ledger.
	takenAt := bk.now().UTC()
	if err := appendNothing(filepath.Join(dir, ledgerFile)); err != nil {
		return nil, err
	}
	if err := bk.updateRegistry(func(reg *backupRegistry) bool {
		reg.Backups = append(reg.Backups, backupEntry{Dir: dir, TakenAt: takenAt})
		return true
	}); err != nil {
		return nil, err
	}
	m, err := bk.copyInto(db, dir, takenAt, version, progress)
	if err != nil {
		bk.updateRegistry(func(reg *backupRegistry) bool {
			kept := reg.Backups[:0:0]
			for _, b := range reg.Backups {
				if b.Dir != dir {
					kept = append(kept, b)
				}
			}
			reg.Backups = kept
			return true
		})
		os.RemoveAll(dir)
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

// prepareDir checks that dir is outside the data dir and empty, and makes
// it owner-only.
func (bk *Backups) prepareDir(dir string) error {
	dataAbs, _ := filepath.Abs(bk.dataDir)
	dirAbs, _ := filepath.Abs(dir)
	rel, err := filepath.Rel(dataAbs, dirAbs)
	if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("--out %s is inside the data dir; put backups elsewhere", dir)
	}
	if names, err := os.ReadDir(dir); err == nil && len(names) > 0 {
		return fmt.Errorf("--out %s exists and is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700) // it may exist, empty, with a wider mode
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
	if !fn(reg) {
		return nil
	}
	return bk.saveRegistry(reg)
}

// copyInto takes the checkpoint into dir/db, copies the keys and writes the
// manifest, last.
func (bk *Backups) copyInto(db *store.DB, dir string, takenAt time.Time, version string, progress io.Writer) (*Manifest, error) {
	if err := checkpoint(db, filepath.Join(dir, "db"), progress); err != nil {
		return nil, err
	}
	size, files := dirSizeFiles(filepath.Join(dir, "db"))
	fmt.Fprintf(progress, "backup: %s\n", progressBar(size, max(size, 1)))
	keys, err := os.ReadFile(filepath.Join(bk.dataDir, store.SecretsFile))
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, store.SecretsFile), 0o600, keys); err != nil {
		return nil, err
	}
	if err := syncTree(filepath.Join(dir, "db")); err != nil {
		return nil, err
	}
	m := &Manifest{Format: backupFormat, TakenAt: takenAt, CompletedAt: bk.now().UTC(), ExpiresAt: takenAt.Add(BackupRetention),
		RetentionDays: int(BackupRetention / (24 * time.Hour)), Version: version, Bytes: size, Files: files, Tenants: []string{}}
	for _, t := range db.Tenants() {
		m.Tenants = append(m.Tenants, t.ID)
	}
	data, _ := json.MarshalIndent(m, "", "  ")
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

// appendNothing creates path (empty, synced) if it does not exist.
func appendNothing(path string) error {
	if err := atomicfile.Append(path, 0o600, nil); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

func progressBar(n, total int64) string {
	if total <= 0 {
		total = 1
	}
	frac := min(float64(n)/float64(total), 1)
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
