package store

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLogsTakeTheDiskTheirRecordsTake: after an open, a burst of writes
// fills memtables that start at 256 KB and double, each with its own
// write-ahead log, before the first flush. The logs hold the disk their
// records take, not Pebble's preallocation of about 70 MB each (seven logs
// held 490 MB of a 600 MB data disk for 22 MB of records, which stopped
// writes there for good).
func TestLogsTakeTheDiskTheirRecordsTake(t *testing.T) {
	dir := t.TempDir()
	probe, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	const keepSize = 1 // FALLOC_FL_KEEP_SIZE, as Pebble preallocates
	err = syscall.Fallocate(int(probe.Fd()), keepSize, 0, 1<<20)
	probe.Close()
	if err != nil {
		t.Skipf("the file system of %s cannot preallocate (%v): nothing to check", dir, err)
	}
	dbDir := filepath.Join(dir, "db")
	db, err := Open(dbDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	value := make([]byte, 256<<10)
	for i := 0; i < 64; i++ { // 16 MB: logs of 256 KB up to 8 MB, under the 32 MB that starts a flush
		b := db.NewBatch()
		b.Set([]byte{spaceGlobal, 'T', byte(i)}, value)
		err := b.Commit()
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(dbDir)
	if err != nil {
		t.Fatal(err)
	}
	var logs, length, allocated int64
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dbDir, e.Name()), &st); err != nil {
			t.Fatal(err)
		}
		logs++
		length += st.Size
		allocated += st.Blocks * 512
	}
	if logs < 4 {
		t.Fatalf("%d write-ahead logs after 16 MB of writes; want the several of a memtable's growth", logs)
	}
	if slack := logs * 64 << 10; allocated > length+slack {
		t.Errorf("%d write-ahead logs hold %d MiB of the disk for %d MiB of records; want at most their length plus %d KiB",
			logs, allocated>>20, length>>20, slack>>10)
	}
}
