package privacy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// RegistryFile is the backup registry's file name in the data dir.
const RegistryFile = backupsFile

// CheckRegistry reads the backup registry (backups.json) as loadRegistry
// does, changing nothing, for "admin check": it returns why a damaged one
// cannot be used (it does not decode, or it is gone while its copy is
// there; the next backup or customer deletion sets it aside and rebuilds
// it) or, when it cannot be read, an *UnreadableRegistryError (deletions
// are owed to every backup until it can); nil when it reads, or when no
// backup was ever registered.
func (bk *Backups) CheckRegistry() error {
	bk.mu.Lock() // not while recoverRegistry moves it away
	defer bk.mu.Unlock()
	data, err := bk.readRegistry(filepath.Join(bk.dataDir, backupsFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(filepath.Join(bk.dataDir, registryCopy)); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%s is gone while %s is there", backupsFile, registryCopy)
	}
	if err != nil {
		return &UnreadableRegistryError{Err: err}
	}
	var r backupRegistry
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s does not decode: %w", backupsFile, err)
	}
	return nil
}
