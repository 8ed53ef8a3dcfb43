package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
)

// writeLog opens a store on fs, commits n synced writes of 100 bytes and
// closes it, leaving them in the newest log (Pebble's Close flushes
// nothing); it returns that log's name and size.
func writeLog(t testing.TB, fs vfs.FS, n int) (string, int64) {
	t.Helper()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := db.pdb.Set(fmt.Appendf(nil, "k%06d", i), make([]byte, 100), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	name, _, ok := newestLogIn(fs, "db")
	if !ok {
		t.Fatal("no log")
	}
	st, err := fs.Stat(fs.PathJoin("db", name))
	if err != nil {
		t.Fatal(err)
	}
	return name, st.Size()
}

func overwrite(t *testing.T, fs vfs.FS, name string, off int64, b []byte) {
	t.Helper()
	f, err := fs.OpenReadWrite(fs.PathJoin("db", name), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func countKeys(t *testing.T, db *DB) int {
	t.Helper()
	n := 0
	if err := db.Scan([]byte("k"), []byte("l"), func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDamagedLogIsReported: damage in the middle of the newest log drops
// the writes after it at open (Pebble takes it for a torn tail); Open now
// keeps a note that names the log, the offset and how many writes were
// lost, which LogDamage lists until ClearLogDamage. A whole log and a torn
// tail keep no note.
func TestDamagedLogIsReported(t *testing.T) {
	tests := []struct {
		name     string
		damage   func(t *testing.T, fs vfs.FS, log string, size int64)
		wantKeys func(int) bool
		wantNote bool
	}{
		{"whole", func(*testing.T, vfs.FS, string, int64) {}, func(n int) bool { return n == 1000 }, false},
		{"torn tail", func(t *testing.T, fs vfs.FS, log string, size int64) {
			overwrite(t, fs, log, size-300, make([]byte, 300))
		}, func(n int) bool { return n >= 997 && n < 1000 }, false},
		{"middle", func(t *testing.T, fs vfs.FS, log string, size int64) {
			overwrite(t, fs, log, size/2, []byte{0xff, 0xee, 0x00})
		}, func(n int) bool { return n < 600 }, true},
		{"second block's first chunk", func(t *testing.T, fs vfs.FS, log string, size int64) {
			overwrite(t, fs, log, logBlockSize+3, []byte{0x77})
		}, func(n int) bool { return n < 400 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := NewMemFS()
			log, size := writeLog(t, fs, 1000)
			tt.damage(t, fs, log, size)
			db, err := Open("db", fs)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { db.Close() }() // the store opened last
			n := countKeys(t, db)
			if !tt.wantKeys(n) {
				t.Errorf("%d keys after open", n)
			}
			notes, err := db.LogDamage()
			if err != nil {
				t.Fatal(err)
			}
			if !tt.wantNote {
				if len(notes) != 0 || db.FoundLogDamage() != nil {
					t.Errorf("notes %v, found %v; want none", notes, db.FoundLogDamage())
				}
				return
			}
			if len(notes) != 1 || db.FoundLogDamage() == nil {
				t.Fatalf("notes %v, found %v; want one", notes, db.FoundLogDamage())
			}
			if _, err := fs.Stat(fs.PathJoin("db", pendingLogNote)); err == nil {
				t.Errorf("the pending note file is left once the note is kept")
			}
			d := notes[0]
			// The lost writes: the damaged one and the readable ones after it.
			if d.File != log || d.Offset > size/2 || d.Lost+n != 1000 || d.FoundAt.IsZero() {
				t.Errorf("note %+v with %d keys kept of 1000", d, n)
			}
			if s := d.String(); !strings.Contains(s, log) || !strings.Contains(s, "lost") {
				t.Errorf("note reads %q", s)
			}
			// Opened again, the store has its kept writes and the one
			// note: the damaged log is not met again.
			db.Close()
			if db, err = Open("db", fs); err != nil {
				t.Fatal(err)
			}
			if again := countKeys(t, db); again != n || db.FoundLogDamage() != nil {
				t.Errorf("reopened: %d keys (want %d), found %v", again, n, db.FoundLogDamage())
			}
			if err := db.ClearLogDamage(); err != nil {
				t.Fatal(err)
			}
			if notes, _ := db.LogDamage(); len(notes) != 0 {
				t.Errorf("after ClearLogDamage: %v", notes)
			}
		})
	}
}

// TestPendingLogNote: a note an open found and wrote to the pending file
// but did not commit (it stopped in between, after Pebble's open dropped
// the damaged log) is kept by the next open, which removes the file; found
// again in a log still damaged, it is one note, with its first time.
func TestPendingLogNote(t *testing.T) {
	first := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	open := func(t *testing.T, fs vfs.FS) ([]LogDamage, *LogDamage) {
		t.Helper()
		db, err := Open("db", fs)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		notes, err := db.LogDamage()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.Stat(fs.PathJoin("db", pendingLogNote)); err == nil {
			t.Errorf("the pending note file is left once the note is kept")
		}
		return notes, db.FoundLogDamage()
	}
	strip := func(d LogDamage) LogDamage { d.Kept = false; return d }

	t.Run("log gone", func(t *testing.T) {
		fs := NewMemFS()
		writeLog(t, fs, 10) // a whole log: the damaged one is gone
		note := LogDamage{File: "000002.log", Offset: 4096, Lost: 7, FoundAt: first}
		if err := writePendingNote(fs, "db", &note); err != nil {
			t.Fatal(err)
		}
		notes, found := open(t, fs)
		if found == nil || !found.Kept || cmp.Diff([]LogDamage{note}, notes) != "" || strip(*found) != note {
			t.Errorf("notes %+v, found %+v; want the pending one, %+v", notes, found, note)
		}
		if notes, found = open(t, fs); found != nil || cmp.Diff([]LogDamage{note}, notes) != "" {
			t.Errorf("reopened: notes %+v, found %+v; want the one note, found nothing", notes, found)
		}
	})
	t.Run("log still damaged", func(t *testing.T) {
		fs := NewMemFS()
		log, size := writeLog(t, fs, 1000)
		overwrite(t, fs, log, size/2, []byte{0xff, 0xee, 0x00})
		lock, err := pebble.LockDirectory("db", fs)
		if err != nil {
			t.Fatal(err)
		}
		pending := findLogDamage(fs, "db", first) // the open that stopped
		lock.Close()
		if pending == nil || readPendingNote(fs, "db") == nil {
			t.Fatalf("found %+v, pending file %+v; want the damage written down", pending, readPendingNote(fs, "db"))
		}
		notes, found := open(t, fs)
		if found == nil || cmp.Diff([]LogDamage{*pending}, notes) != "" {
			t.Errorf("notes %+v, found %+v; want one, %+v", notes, found, *pending)
		}
	})
}

// TestScanLogRecycledTail: a recycled log keeps an older log's bytes after
// its own; they are not this log's records and not damage.
func TestScanLogRecycledTail(t *testing.T) {
	fs := NewMemFS()
	log, size := writeLog(t, fs, 300)
	f, _ := fs.Open(fs.PathJoin("db", log))
	data := make([]byte, size)
	f.ReadAt(data, 0)
	f.Close()
	_, num, _ := newestLogIn(fs, "db")
	// Whole: whatever closes it (its end, an end-of-log trailer), nothing
	// readable follows.
	if _, lost := scanLog(strings.NewReader(string(data)), uint32(num)); lost != 0 {
		t.Errorf("whole log: %d lost", lost)
	}
	// The same bytes read as log num+1's: an older log's, nothing of ours.
	at, lost := scanLog(strings.NewReader(string(data)), uint32(num)+1)
	if at != 0 || lost != 0 {
		t.Errorf("older log's bytes: damage at %d, %d lost; want 0, 0", at, lost)
	}
}

// FuzzScanLog: any bytes, read as a log, give an answer without a panic,
// and a damage offset inside the file.
func FuzzScanLog(f *testing.F) {
	fs := NewMemFS()
	log, size := writeLog(f, fs, 20)
	data := make([]byte, size)
	if g, err := fs.Open(fs.PathJoin("db", log)); err == nil {
		g.ReadAt(data, 0)
		g.Close()
	}
	f.Add(data, uint32(2))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, num uint32) {
		// Three blocks cover a block boundary on each side; resync's
		// search is quadratic in a block of chunk-like bytes.
		b = b[:min(len(b), 3*logBlockSize)]
		at, lost := scanLog(strings.NewReader(string(b)), num)
		if at >= int64(len(b)) || lost < 0 || (at < 0 && lost != 0) {
			t.Errorf("damage at %d, %d lost, in %d bytes", at, lost, len(b))
		}
	})
}

// TestRecycledLogIsNotDamage: on disk, after memtable flushes Pebble
// writes its new logs over old ones (walFS, recycling); the newest log
// then holds an older log's records past its own end. Reopened, the store
// keeps every write and notes no damage. Not under -short (it writes
// about 200 MB).
func TestRecycledLogIsNotDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("writes about 200 MB")
	}
	dir := t.TempDir()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 1000)
	const n = 200_000
	for i := range n {
		b := db.NewBatch()
		b.Set(fmt.Appendf(nil, "k%07d", i), val)
		if err := b.b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	// A flush starts a new log, recycled from an old one, and a last
	// synced write goes into it: the old records stay past it.
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	b.Set([]byte("klast"), val)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	name, _, _ := newestLogIn(vfs.Default, dir)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	_, num, _ := newestLogIn(vfs.Default, dir)
	end, _ := scanLog(f, uint32(num))
	f.Close()
	t.Logf("newest log %s: %d bytes, its records end at %d", name, st.Size(), end)
	if db, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if end >= st.Size()/2 {
		t.Errorf("the newest log is not a recycled one holding older records")
	}
	if got := countKeys(t, db); got != n+1 || db.FoundLogDamage() != nil {
		t.Errorf("reopened: %d keys (want %d), damage %v; newest log %s of %d bytes", got, n+1, db.FoundLogDamage(), name, st.Size())
	}
}

// writePaddedLog opens a store on fs and commits synced writes so that
// the log's first block ends in pad bytes of zero padding (the writer's
// filler when fewer bytes are left than a chunk header needs), then 100
// more writes, and closes it. It returns the log's name, the padding's
// offset and the number of writes (keys) in the log.
func writePaddedLog(t *testing.T, fs vfs.FS, pad int) (log string, at int64, keys int) {
	t.Helper()
	db, err := Open("db", fs)
	if err != nil {
		t.Fatal(err)
	}
	log, _, _ = newestLogIn(fs, "db")
	size := func() int64 {
		st, err := fs.Stat(fs.PathJoin("db", log))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	set := func(n int) {
		if err := db.pdb.Set(fmt.Appendf(nil, "k%06d", keys), make([]byte, n), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		keys++
	}
	set(100)
	// A Set's batch is 24 bytes and its value (3-byte length varint); its
	// chunk adds an 11-byte header. The writer fills the block's rest.
	at = logBlockSize - int64(pad)
	set(int(at-size()) - logRecyclableHdr - 24)
	if got := size(); got != logBlockSize {
		t.Fatalf("the first block ends at %d, want %d", got, logBlockSize)
	}
	for range 100 {
		set(100)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return log, at, keys
}

// TestDamagedBlockPadding: Pebble reads a block's zero padding as a
// header when 7 to 10 bytes are left and stops the log at it unless
// those 7 are zero: damage there drops every write after it, and Open
// notes them, not one more (the padding held no write). A damaged byte Pebble does not read loses
// nothing and is not noted.
func TestDamagedBlockPadding(t *testing.T) {
	tests := []struct {
		name     string
		pad, at  int // padding length; damaged byte in it
		wantLost int // 0: no note
	}{
		{"8 bytes, first", 8, 0, 100},
		{"8 bytes, header's last", 8, 6, 100},
		{"8 bytes, beyond a legacy header", 8, 7, 0},
		{"7 bytes", 7, 0, 100},
		{"10 bytes", 10, 3, 100},
		{"6 bytes", 6, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := NewMemFS()
			log, at, keys := writePaddedLog(t, fs, tt.pad)
			overwrite(t, fs, log, at+int64(tt.at), []byte{0x5a})
			db, err := Open("db", fs)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			kept := countKeys(t, db)
			var got LogDamage
			if d := db.FoundLogDamage(); d != nil {
				got = LogDamage{File: d.File, Offset: d.Offset, Lost: d.Lost}
			}
			want := LogDamage{}
			if tt.wantLost > 0 {
				want = LogDamage{File: log, Offset: at, Lost: tt.wantLost}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("note (-want +got):\n%s", diff)
			}
			if kept+tt.wantLost != keys {
				t.Errorf("%d of %d writes kept, %d noted lost", kept, keys, tt.wantLost)
			}
		})
	}
}

// TestDamagedOlderLogNamed: damage in a log that is not the newest makes
// Pebble refuse the store (it replays older logs strictly); the error now
// names the log and the offset, which Pebble's did not. A log closed
// cleanly ends with Pebble's end-of-file trailer, which is no damage.
func TestDamagedOlderLogNamed(t *testing.T) {
	fs := NewMemFS()
	log, size := writeLog(t, fs, 1000)
	f, err := fs.Open(fs.PathJoin("db", log))
	if err != nil {
		t.Fatal(err)
	}
	_, num, _ := newestLogIn(fs, "db")
	if at, lost := scanLog(f, uint32(num)); lost != 0 || at >= 0 {
		t.Errorf("whole log: damage at %d, %d lost", at, lost)
	}
	f.Close()
	// A newer, empty log: the written one is now an older log.
	g, err := fs.Create(fs.PathJoin("db", "000099.log"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if names := damagedLogs(fs, "db"); len(names) != 0 {
		t.Errorf("whole logs named damaged: %v", names)
	}
	overwrite(t, fs, log, size/2, []byte{0xff, 0xee, 0x00})
	db, err := Open("db", fs)
	if err == nil {
		db.Close()
		t.Fatal("a damaged older log: the store opened")
	}
	if !strings.Contains(err.Error(), "damaged: "+log+" at byte ") || !strings.Contains(err.Error(), "restore the latest backup") {
		t.Errorf("error %q does not name %s and say to restore", err, log)
	}
}

// newestLogIn is newestLog over the files of dir.
func newestLogIn(fs vfs.FS, dir string) (string, uint64, bool) {
	names, _ := fs.List(dir)
	return newestLog(names)
}
