package privacy

// RegistryFile is the backup registry's file name in the data dir.
const RegistryFile = backupsFile

// CheckRegistry reads the backup registry (backups.json) as loadRegistry
// does, changing nothing, for "admin check": it returns why a damaged one
// cannot be used (it does not decode, or it is gone while its copy is
// there; the next backup or customer deletion sets it aside and rebuilds
// it) or, when it cannot be read, an *UnreadableRegistryError (deletions
// are owed to every backup until it can); nil when it reads, or when no
// backup was ever registered. What it finds is what RegistryUnusable
// reports until the next read.
func (bk *Backups) CheckRegistry() error {
	bk.mu.Lock() // not while recoverRegistry moves it away
	defer bk.mu.Unlock()
	_, _, damage, err := bk.readRegistryFile()
	bk.registryUnusable.Store(damage != nil || err != nil)
	if damage != nil {
		return damage
	}
	return err
}

// RegistryCopyFile is the file name of the registry's copy in the data
// dir, from which a damaged registry is rebuilt and List lists.
const RegistryCopyFile = registryCopy
