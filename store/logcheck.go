package store

// Damage inside the newest write-ahead log. Pebble replays the newest log
// up to the first chunk it cannot read and takes that chunk for the torn
// tail a crash leaves: when the damage sits in the middle of the log (a
// flipped sector, a bad disk), every write after it is dropped without a
// word. Before Pebble opens the store, checkNewestLog reads that log
// itself: a damaged chunk followed by readable records of the same log is
// damage, not a tail. Open then records a LogDamage note (the log, the
// offset, how many writes after it Pebble will not replay): serve logs it,
// admin check reports it until --repair acknowledges it, and /metrics
// counts it. The writes are lost either way; the note makes the loss
// known (Pebble keeps the readable prefix, as a crash there would have).

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// LogDamage is the note Open keeps when the newest write-ahead log had
// damage with readable records after it.
type LogDamage struct {
	File    string    `json:"file"`   // the log's name in the store dir, e.g. 000012.log
	Offset  int64     `json:"offset"` // byte offset of the first damaged chunk
	Lost    int       `json:"lost"`   // writes not replayed, at least: the damaged one and the readable ones after it
	FoundAt time.Time `json:"found_at"`
	// Kept says the note is stored (admin check lists it); false when
	// storing it failed, and then only serve's log says it.
	Kept bool `json:"-"`
}

// String is the note as admin check and serve's log say it.
func (d LogDamage) String() string {
	return fmt.Sprintf("store log %s, damaged at byte %d (found %s): at least %d writes from there on were not replayed and are lost (after a power cut they may be writes never acknowledged)",
		d.File, d.Offset, d.FoundAt.UTC().Format(time.RFC3339), d.Lost)
}

// logDamageKey is the key of the note found at at: 0x01 'L' time → the
// note as JSON. Notes name no customer.
func logDamageKey(at time.Time) []byte { return appendTime([]byte{spaceGlobal, globalLogDamage}, at) }

func logDamageSpan() (lower, upper []byte) {
	p := []byte{spaceGlobal, globalLogDamage}
	return p, prefixEnd(p)
}

// LogDamage lists the notes of damaged logs found at open, oldest first,
// until ClearLogDamage. A note that does not decode is listed by its key.
func (db *DB) LogDamage() ([]LogDamage, error) {
	lo, hi := logDamageSpan()
	var out []LogDamage
	err := db.Scan(lo, hi, func(k, v []byte) error {
		var d LogDamage
		if json.Unmarshal(v, &d) != nil {
			d = LogDamage{File: fmt.Sprintf("(unreadable note %x)", k)}
		}
		out = append(out, d)
		return nil
	})
	return out, err
}

// ClearLogDamage removes every log damage note (admin check --repair: the
// operator has seen them).
func (db *DB) ClearLogDamage() error {
	lo, hi := logDamageSpan()
	b := db.NewBatch()
	defer b.Close()
	if err := b.b.DeleteRange(lo, hi, nil); err != nil {
		return err
	}
	return b.Commit()
}

// FoundLogDamage is the note this Open kept, nil when the newest log was
// whole: serve logs it.
func (db *DB) FoundLogDamage() *LogDamage { return db.foundLog }

// keepLogDamage stores d (found before Pebble opened) with Sync.
func (db *DB) keepLogDamage(d *LogDamage) error {
	v, err := json.Marshal(d)
	if err != nil {
		return err
	}
	b := db.NewBatch()
	defer b.Close()
	b.Set(logDamageKey(d.FoundAt), v)
	return b.Commit()
}

// pendingLogNote is the file in the store dir that holds a note from the
// check before Pebble opens until the note is committed in the store:
// Pebble's open replays the damaged log and may then drop it, so a crash
// in between would lose the note with the log. Pebble ignores the files of
// its directory it does not know.
const pendingLogNote = "coupond-log-damage.json"

// writePendingNote writes d to dir's pending note file and syncs it and
// the directory; an error leaves the note to the store's commit alone.
func writePendingNote(fs vfs.FS, dir string, d *LogDamage) error {
	v, err := json.Marshal(d)
	if err != nil {
		return err
	}
	tmp, final := fs.PathJoin(dir, pendingLogNote+".tmp"), fs.PathJoin(dir, pendingLogNote)
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(v)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = fs.Rename(tmp, final)
	}
	if err != nil {
		return errors.Join(err, fs.Remove(tmp))
	}
	d2, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d2.Sync(), d2.Close())
}

// readPendingNote reads dir's pending note file: nil when there is none
// or it does not decode.
func readPendingNote(fs vfs.FS, dir string) *LogDamage {
	f, err := fs.Open(fs.PathJoin(dir, pendingLogNote))
	if err != nil {
		return nil
	}
	defer f.Close()
	v, err := io.ReadAll(io.LimitReader(f, 1<<16))
	var d LogDamage
	if err != nil || json.Unmarshal(v, &d) != nil || d.File == "" {
		return nil
	}
	return &d
}

// findLogDamage is the note an open keeps: the damage checkNewestLog
// finds, written to the pending note file before Pebble opens, or else the
// pending note an earlier open left when it stopped before committing it
// (that one too when the damage found is the same, still there).
func findLogDamage(fs vfs.FS, dir string, now time.Time) *LogDamage {
	pending := readPendingNote(fs, dir)
	found := checkNewestLog(fs, dir, now)
	if found == nil || pending != nil && pending.File == found.File && pending.Offset == found.Offset {
		return pending
	}
	// Not written (a full disk, say), the note is still committed below
	// if it can be, and logged by serve.
	_ = writePendingNote(fs, dir, found)
	return found
}

// checkNewestLog reads the newest write-ahead log in dir and returns a
// note when a damaged chunk has readable records of the same log after it;
// nil for a whole log, a torn tail, or no log. It reads only; errors
// reading the directory or the file return nil too (Pebble's open then
// meets them itself).
func checkNewestLog(fs vfs.FS, dir string, now time.Time) *LogDamage {
	names, _ := fs.List(dir)
	name, num, ok := newestLog(names)
	if !ok {
		return nil
	}
	at, lost, ok := scanLogFile(fs, dir, name, num)
	if !ok || at < 0 || lost == 0 {
		return nil
	}
	return &LogDamage{File: name, Offset: at, Lost: lost, FoundAt: now}
}

// scanLogFile is scanLog of the log file name (number num) in dir; false
// when it cannot be opened.
func scanLogFile(fs vfs.FS, dir, name string, num uint64) (damageAt int64, lost int, ok bool) {
	f, err := fs.Open(fs.PathJoin(dir, name))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	damageAt, lost = scanLog(f, uint32(num))
	return damageAt, lost, true
}

// newestLog finds the write-ahead log with the highest number among the
// file names of a store dir.
func newestLog(names []string) (name string, num uint64, ok bool) {
	for _, n := range names {
		v, isLog := logNumber(n)
		if !isLog {
			continue
		}
		if !ok || v > num {
			name, num, ok = n, v, true
		}
	}
	return name, num, ok
}

// logNumber is the number of the write-ahead log file named name
// (NNNNNN.log); false for any other file.
func logNumber(name string) (uint64, bool) {
	digits, isLog := strings.CutSuffix(name, ".log")
	v, err := strconv.ParseUint(digits, 10, 64)
	return v, isLog && err == nil
}

// The log's framing (Pebble's record package): 32 KiB blocks of chunks;
// a chunk is checksum (4, masked CRC-32C of the bytes from the type on),
// length (2), type (1), then, in the recyclable formats every Pebble log
// writer uses, the log number (4) and, in the WAL-sync format, a synced
// offset (8); then length bytes of payload. A record is one full chunk or
// first, middle..., last. A block's tail too short for a header is zeros;
// Pebble's reader still reads one of 7 bytes or more as a (legacy) header.
const (
	logBlockSize      = 32 << 10
	logLegacyHdr      = 7
	logRecyclableHdr  = 11
	logWALSyncHdr     = 19
	logTypeRecyclable = 5 // full, first, middle, last: 5..8
	logTypeWALSync    = 9 // full, first, middle, last: 9..12
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// scanLog walks the log's chunks. It returns the offset of the first chunk
// (or block padding) Pebble cannot read, -1 when none, and the number of
// writes Pebble will not replay when readable records of log number num
// follow it: the damaged chunk's record, if the damage hit one, and the
// records (full or first chunks) after it; 0 when none follow. Zeros,
// chunks of an older log (a recycled file's old bytes) and the end of the
// file close the log without counting as damage unless readable records of
// num follow them.
func scanLog(r io.ReaderAt, num uint32) (damageAt int64, lost int) {
	s := logScan{num: num, damageAt: -1}
	buf := make([]byte, logBlockSize)
	for block := int64(0); ; block++ {
		n, err := r.ReadAt(buf, block*logBlockSize)
		if n > 0 {
			s.block(buf[:n], block*logBlockSize)
		}
		if s.ended || n < logBlockSize || (err != nil && !errors.Is(err, io.EOF)) {
			break
		}
	}
	if s.after == 0 {
		return s.damageAt, 0
	}
	if s.inRecord {
		return s.damageAt, s.after + 1
	}
	return s.damageAt, s.after
}

// logScan is scanLog's state from block to block.
type logScan struct {
	num      uint32
	damageAt int64 // -1 until the first chunk or padding Pebble cannot read
	inRecord bool  // the damage is in a chunk: its record is lost too
	after    int   // records readable after the damage
	ended    bool  // the log's end-of-file trailer was met
}

// isEOFTrailer reports whether b starts with the trailer Pebble's writer
// ends a log it closes with: a recyclable full-chunk header of no length
// and no checksum naming the next log number.
func isEOFTrailer(b []byte, num uint32) bool {
	return len(b) >= logRecyclableHdr && binary.LittleEndian.Uint32(b[0:4]) == 0 && binary.LittleEndian.Uint16(b[4:6]) == 0 &&
		b[6] == logTypeRecyclable && binary.LittleEndian.Uint32(b[7:11]) == num+1
}

// damagedLogs names the write-ahead logs of dir Pebble refuses or cuts
// short: an older log with anything it cannot read before its end (Pebble
// replays those strictly), the newest one with readable records after
// damage. For the error of an Open that Pebble refused as corrupt.
func damagedLogs(fs vfs.FS, dir string) []string {
	names, _ := fs.List(dir)
	newest, _, _ := newestLog(names)
	sort.Strings(names)
	var out []string
	for _, n := range names {
		num, isLog := logNumber(n)
		if !isLog {
			continue
		}
		at, lost, ok := scanLogFile(fs, dir, n, num)
		if ok && at >= 0 && (n != newest || lost > 0) {
			out = append(out, fmt.Sprintf("%s at byte %d", n, at))
		}
	}
	return out
}

// block walks the chunks of one block b, at offset off in the log.
func (s *logScan) block(b []byte, off int64) {
	pos := 0
	for pos+logRecyclableHdr <= len(b) {
		if len(b)-pos < logWALSyncHdr && allZero(b[pos:]) {
			return // a WAL-sync writer's padding
		}
		if isEOFTrailer(b[pos:], s.num) {
			s.ended = true // a log closed cleanly; what follows is older
			return
		}
		size, first, ok := readChunk(b[pos:], s.num)
		if !ok {
			s.damaged(off+int64(pos), true)
			pos = resync(b, pos, size, s.num)
			continue
		}
		if first && s.damageAt >= 0 {
			s.after++
		}
		pos += size
	}
	// Pebble reads a tail of 7 to 10 bytes (a legacy header's size, not a
	// recyclable one's) as a header unless its first 7 are zero, and stops
	// the log there: padding, they hold no write.
	if tail := b[pos:]; len(tail) >= logLegacyHdr && !allZero(tail[:logLegacyHdr]) {
		s.damaged(off+int64(pos), false)
	}
}

// damaged records damage at offset at, in a chunk or not, unless some was
// met before.
func (s *logScan) damaged(at int64, inChunk bool) {
	if s.damageAt < 0 {
		s.damageAt, s.inRecord = at, inChunk
	}
}

// resync finds where to read on in block b after the unreadable chunk at
// pos: past it when its header gave its size and a readable chunk follows
// (a damaged payload), else the next offset holding a readable chunk of
// log num (a damaged header: its CRC and log number make a false match
// unlikely), else the block's end.
func resync(b []byte, pos, size int, num uint32) int {
	if size > 0 && pos+size+logRecyclableHdr <= len(b) {
		if _, _, ok := readChunk(b[pos+size:], num); ok {
			return pos + size
		}
	}
	for p := pos + 1; p+logRecyclableHdr <= len(b); p++ {
		if _, _, ok := readChunk(b[p:], num); ok {
			return p
		}
	}
	return len(b)
}

// readChunk reads the chunk at the start of b: its size with header, whether
// it starts a record, and whether it is a readable chunk of log num. A
// chunk of log num whose payload fails its checksum is not readable but
// has its size; a zeroed or otherwise unusable header has size 0.
func readChunk(b []byte, num uint32) (size int, first, ok bool) {
	typ := b[6]
	hdr := 0
	switch {
	case typ >= logTypeRecyclable && typ < logTypeRecyclable+4:
		hdr = logRecyclableHdr
	case typ >= logTypeWALSync && typ < logTypeWALSync+4:
		hdr = logWALSyncHdr
	default:
		return 0, false, false
	}
	length := int(binary.LittleEndian.Uint16(b[4:6]))
	if hdr+length > len(b) || binary.LittleEndian.Uint32(b[7:11]) != num {
		return 0, false, false
	}
	c := crc32.Checksum(b[6:hdr+length], crc32c)
	if binary.LittleEndian.Uint32(b[0:4]) != (c>>15|c<<17)+0xa282ead8 {
		return hdr + length, false, false
	}
	pos := (typ - logTypeRecyclable) % 4 // 0 full, 1 first, 2 middle, 3 last
	return hdr + length, pos == 0 || pos == 1, true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
