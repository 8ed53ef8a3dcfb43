package store

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
)

// BenchmarkCommit is a synced commit of a decision-sized batch (four keys,
// 400 bytes of values) on an in-memory store, where no fsync hides what
// Commit itself costs: one committer, and as many as GOMAXPROCS.
func BenchmarkCommit(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			db, err := Open("db", NewMemFS())
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			value := make([]byte, 100)
			commit := func(i uint64) {
				batch := db.NewBatch()
				defer batch.Close()
				for k := byte(0); k < 4; k++ {
					batch.Set(binary.BigEndian.AppendUint64([]byte{'b', k}, i), value)
				}
				if err := batch.Commit(); err != nil {
					b.Error(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			if !parallel {
				for i := 0; i < b.N; i++ {
					commit(uint64(i))
				}
				return
			}
			var next atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					commit(next.Add(1))
				}
			})
		})
	}
}
