package privacy

import (
	"io/fs"
	"syscall"
)

// fileOwner is the uid that owns the file of info (ok false when the
// platform does not say).
func fileOwner(info fs.FileInfo) (uid int, ok bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
