package privacy

import (
	"bytes"
	"slices"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// A cliente_ref that a point of sale uses for every walk-in sale holds
// millions of events. Erased in the erasure's one batch, they cost memory
// in proportion (measured: 1,000,000 events, 930 MB of heap and 4 s with
// the tenant's ingestion and learning stopped), and a process killed for
// it would redo the whole of it at the next pass, and be killed again. So
// the customer's plain events go first, in chunks of eraseChunk index
// entries, each chunk a synced batch of its own under the customer's
// locks, taken and released per chunk: ingestion and learning go on
// between chunks, and a pass cut short resumes where the index is left.
//
// A plain event is one that decodes, is the customer's, and names no
// coupon: deleting it and its index entry is all its erasure is (its
// quarantined copies, if any, go in the same batch). Every other index
// entry (a coupon's event, a damaged or missing event, an event_id first
// used by another customer) is left to the erasure's batch (erasure.events),
// which alone knows what to do with them.
//
// Each chunk's batch also widens, in the deletion's queue entry, the
// bounds of the keys the chunks deleted (deletionJob.Chunked): a pass that
// resumes after a crash no longer finds those keys, and still compacts
// them out of the sstables.

// defaultEraseChunk is the index entries one chunk reads.
const defaultEraseChunk = 10000

// maxPointKeys bounds the keys an erasure's chunks return one by one for
// compaction (toCompact.points, a few tens of bytes each); past it they
// are returned as their bounds per table, whose whole span is compacted:
// a walk-in account's millions of events, spread over the events table.
const maxPointKeys = 100000

// eraseEventChunks erases ref's plain events and their index entries, a
// chunk at a time, and returns what compactKeys needs: the keys it deleted,
// or their bounds per table past maxPointKeys.
// job, when not nil, is the deletion's queue entry, whose Chunked each
// chunk's batch widens.
func (s *Service) eraseEventChunks(tenant, ref string, job *queuedDeletion) (toCompact, error) {
	n := s.eraseChunk
	if n <= 0 {
		n = defaultEraseChunk
	}
	var touched toCompact
	lo, hi := store.CustomerEventSpan(tenant, ref)
	for lo != nil {
		next, keys, err := s.eraseEventChunk(tenant, ref, job, lo, hi, n)
		touched.points, lo = append(touched.points, keys...), next
		if len(touched.points) > maxPointKeys {
			touched = toCompact{bounds: touched.asBounds()}
		}
		if err != nil {
			return touched, err
		}
		if s.afterChunk != nil {
			s.afterChunk()
		}
	}
	return touched, nil
}

// eraseEventChunk erases the plain events among the (at most n) index
// entries of ref from lo, and returns where the next chunk starts (nil
// after the last) and the keys it deleted.
func (s *Service) eraseEventChunk(tenant, ref string, job *queuedDeletion, lo, hi []byte, n int) (next []byte, deleted [][]byte, err error) {
	unlock, err := s.rec.LockCustomer(tenant, ref)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	idx, evKeys, next, err := s.eventIndexChunk(s.db, tenant, ref, lo, hi, n)
	if err != nil || len(idx) == 0 {
		return nil, nil, err
	}
	plain := make([]bool, len(evKeys))
	err = s.db.GetMany(evKeys, func(i int, v []byte) error {
		if len(v) >= 32 {
			ev, ok := engine.DecodeEvent(v[32:])
			plain[i] = ok && ev.ClienteRef == ref && ev.CuponEmitidoID == ""
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return next, deleted, s.commitChunk(tenant, ref, job, idx, evKeys, plain, &deleted)
}

// commitChunk deletes, in one synced batch, the plain events of a chunk,
// their index entries and their quarantined copies, adds the keys it
// deleted to deleted and their smallest and largest of each table to job's
// Chunked, written in the batch.
func (s *Service) commitChunk(tenant, ref string, job *queuedDeletion, idx, evKeys [][]byte, plain []bool, deleted *[][]byte) error {
	b := s.db.NewBatch()
	defer b.Close()
	var gone, keys [][]byte
	for i, k := range evKeys {
		if !plain[i] {
			continue
		}
		b.Delete(k)
		b.Delete(idx[i])
		gone = append(gone, k)
		keys = append(keys, k, idx[i])
	}
	if len(gone) == 0 {
		return nil
	}
	qkeys, err := s.rec.CustomerDamaged(tenant, ref, gone)
	if err != nil {
		return err
	}
	for _, k := range qkeys {
		b.Delete(k)
		keys = append(keys, k)
	}
	*deleted = append(*deleted, keys...)
	if job != nil {
		job.job.Chunked = tableBounds(append(job.job.Chunked, keys...))
		if err := b.SetJSON(job.key, &job.job); err != nil {
			return err
		}
	}
	return b.Commit()
}

// tableBounds returns, of keys, the smallest and the largest of each table
// (sorted), which is all compactKeys reads of them.
func tableBounds(keys [][]byte) [][]byte {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, bytes.Compare)
	var out [][]byte
	for i, k := range keys {
		first := i == 0 || !bytes.Equal(tableOf(keys[i-1]), tableOf(k))
		last := i == len(keys)-1 || !bytes.Equal(tableOf(keys[i+1]), tableOf(k))
		if first || last {
			out = append(out, k)
		}
	}
	return out
}
