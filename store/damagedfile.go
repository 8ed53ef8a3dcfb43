package store

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// DamagedFileError is a read's error when one of the store's files failed
// its checksum (a flipped byte in a table file, say). Its message names the
// file and what to do; Pebble's own named the file by number only and ended
// with a line "<corruption detail carrier>", which is what serve and every
// admin command printed when the damaged file held tenants or credentials.
type DamagedFileError struct {
	Path string // the damaged file
	err  error  // Pebble's error
}

func (e *DamagedFileError) Error() string {
	return fmt.Sprintf("store file %s is damaged (checksum mismatch): the reads that need it fail; "+
		"stop coupond and restore the latest backup (coupond admin restore)", e.Path)
}

func (e *DamagedFileError) Unwrap() error { return e.err }

// namingDamage returns err as a *DamagedFileError when Pebble reports a
// damaged file in it, else err unchanged (nil stays nil). The message never
// quotes the damaged file's keys: they can name customers.
func namingDamage(err error) error {
	if err == nil {
		return nil
	}
	info := pebble.ExtractDataCorruptionInfo(err)
	if info == nil {
		return err
	}
	return &DamagedFileError{Path: info.Path, err: err}
}
