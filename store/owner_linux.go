package store

import (
	"io/fs"
	"syscall"
)

// FileOwner is the uid that owns the file of info (ok false when the
// platform does not say).
func FileOwner(info fs.FileInfo) (uid int, ok bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
