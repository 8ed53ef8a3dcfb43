package store

import (
	"time"

	"github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"
)

// Metrics is a snapshot of the store's health, for the server's metrics.
type Metrics struct {
	DiskBytes             uint64 // disk space used by the store
	ReadAmp               int    // read amplification of the LSM
	CompactionDebt        uint64 // estimated compaction debt, bytes
	Compactions           int64  // compactions run
	CompactedBytes        uint64 // bytes of tables compactions wrote since the store opened
	CompactionsInProgress int64
	MemtableBytes         uint64
	WALBytes              uint64 // live WAL size
	// WALFsyncs counts WAL fsyncs since the store opened (every acknowledged
	// write is synced; concurrent commits share one fsync); -1 when unknown.
	WALFsyncs int64
	// WriteStalls counts the times since the store opened that Pebble
	// stopped every commit until a flush or an L0 compaction caught up;
	// WriteStallTime is how long they lasted in all.
	WriteStalls    int64
	WriteStallTime time.Duration
}

// Metrics returns a snapshot of the store's health. Once one of Pebble's
// goroutines is parked (park.go) it returns the last reading: Pebble's
// metrics take the mutex that goroutine may hold.
func (db *DB) Metrics() Metrics {
	if db.space.isParked() {
		if last := db.lastMetrics.Load(); last != nil {
			return *last
		}
		return Metrics{WALFsyncs: -1}
	}
	out := db.readMetrics()
	db.lastMetrics.Store(&out)
	return out
}

// readMetrics reads Pebble's metrics.
func (db *DB) readMetrics() Metrics {
	m := db.pdb.Metrics()
	out := Metrics{
		DiskBytes:             m.DiskSpaceUsage(),
		ReadAmp:               m.ReadAmp(),
		CompactionDebt:        m.Compact.EstimatedDebt,
		Compactions:           m.Compact.Count,
		CompactedBytes:        compactedBytes(m),
		CompactionsInProgress: m.Compact.NumInProgress,
		MemtableBytes:         m.MemTable.Size,
		WALBytes:              m.WAL.Size,
		WALFsyncs:             -1,
	}
	out.WriteStalls, out.WriteStallTime = db.stalls.total()
	if h := m.LogWriter.FsyncLatency; h != nil {
		var pb dto.Metric
		if h.Write(&pb) == nil && pb.Histogram != nil {
			out.WALFsyncs = int64(pb.Histogram.GetSampleCount())
		}
	}
	return out
}

// compactedBytes sums, over the levels, the bytes of tables compactions
// wrote.
func compactedBytes(m *pebble.Metrics) uint64 {
	var n uint64
	for _, l := range m.Levels {
		n += l.TableBytesCompacted
	}
	return n
}

// DiskSpaceUsage is the disk space used by the store, in bytes.
func (db *DB) DiskSpaceUsage() uint64 { return db.Metrics().DiskBytes }
