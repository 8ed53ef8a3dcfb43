package privacy

import (
	"bytes"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// A point of sale that asks for a decision at every walk-in sale gives its
// walk-in cliente_ref a decision per sale: millions, like its events. So
// the export walks the customer's decision index as it walks the event
// index (exportevents.go): a chunk of exportChunk entries at a time, one
// GetMany per chunk, each decision handed on as it is read. The
// confirmations, a member of their own after the decisions, come from a
// second walk of the same index: every decision is read twice, and nothing
// is held across chunks but what the events' walk keeps (eventsWalk).

// exportDecisions calls emit with each of ref's decisions, in index order,
// a chunk at a time, and adds to w the damaged records among those the
// index names (for en_cuarentena).
func (s *Service) exportDecisions(r store.Reader, tenant, ref string, w *eventsWalk, emit func(*client.DecisionExportada) error) error {
	return s.walkDecisions(r, tenant, ref, w, true, func(id string, rec *engine.DecisionRecord) error {
		d := exportDecision(id, rec)
		return emit(&d)
	})
}

// exportConfirmations calls emit with the confirmation of each of ref's
// confirmed decisions, in index order: a second walk of the decision index,
// which adds to w only the records it moves to quarantine itself (the
// first walk gave w the index's keys).
func (s *Service) exportConfirmations(r store.Reader, tenant, ref string, w *eventsWalk, emit func(*client.ConfirmacionExportada) error) error {
	return s.walkDecisions(r, tenant, ref, w, false, func(id string, rec *engine.DecisionRecord) error {
		if rec.ConfirmadaEn == nil {
			return nil
		}
		c := client.ConfirmacionExportada{DecisionID: id, EstadoEjecucion: rec.Estado, AccionReal: rec.AccionReal,
			TsEjecucion: utcPtr(rec.TsEjecucion), ConfirmadaEn: rec.ConfirmadaEn.UTC()}
		if rec.MotivoRechazo != "" {
			m := rec.MotivoRechazo
			c.MotivoRechazo = &m
		}
		return emit(&c)
	})
}

// walkDecisions calls emit with the decision_id and record of each of
// ref's decisions, in index order, a chunk of index entries at a time:
// a decision gone or another customer's is skipped, a damaged one is moved
// to quarantine instead. After each chunk it gives w.addDamaged, when
// every is set, the decision keys of the chunk's entries whose record is
// missing or damaged (a record quarantined before the export counts too);
// otherwise those of the records it moved to quarantine. A chunk whose
// records are all whole does not read the quarantine.
func (s *Service) walkDecisions(r store.Reader, tenant, ref string, w *eventsWalk, every bool,
	emit func(id string, r *engine.DecisionRecord) error) error {
	n := s.exportChunkSize()
	lo, hi := store.CustomerDecisionSpan(tenant, ref)
	for lo != nil {
		keys, damaged, next, err := s.exportDecisionChunk(r, tenant, ref, lo, hi, n, emit)
		if err != nil {
			return err
		}
		if !every {
			keys = damaged
		}
		if len(keys) > 0 {
			if err := w.addDamaged(s, tenant, ref, keys); err != nil {
				return err
			}
		}
		lo = next
		if s.afterExportChunk != nil {
			if err := s.afterExportChunk(); err != nil {
				return err
			}
		}
	}
	return nil
}

// exportDecisionChunk emits the decisions of up to n entries of ref's
// decision index from lo (hi its end), in index order, and returns the
// decision keys the entries name whose record is missing or damaged, those
// of them it moved to quarantine, and where the next chunk starts (nil
// after the last).
func (s *Service) exportDecisionChunk(rd store.Reader, tenant, ref string, lo, hi []byte, n int,
	emit func(id string, r *engine.DecisionRecord) error) (missing, damaged [][]byte, next []byte, err error) {
	nonces, next, err := s.indexChunk(rd, tenant, decisionIndex, lo, hi, n)
	if err != nil {
		return nil, nil, nil, err
	}
	keys := make([][]byte, len(nonces))
	for i, nonce := range nonces {
		keys[i] = s.rec.DecisionKey(tenant, nonce)
	}
	type broken struct {
		v     []byte
		cause error
	}
	recs, bad := make([]*engine.DecisionRecord, len(keys)), map[int]broken{}
	if err := rd.GetMany(keys, func(i int, v []byte) error {
		r, err := s.rec.DecodeDecision(v)
		if err != nil {
			bad[i] = broken{bytes.Clone(v), err}
		}
		recs[i] = r
		return nil
	}); err != nil {
		return nil, nil, nil, err
	}
	for i, r := range recs {
		if b, ok := bad[i]; ok {
			s.rec.Quarantine(tenant, keys[i], b.v, b.cause) // as LoadDecision does; skipped
			damaged, missing = append(damaged, keys[i]), append(missing, keys[i])
			continue
		}
		if r == nil {
			missing = append(missing, keys[i]) // deleted, or quarantined before
			continue
		}
		if r.ClienteRef != ref {
			continue // another customer's
		}
		if err := emit(s.rec.DecisionID(tenant, nonces[i]), r); err != nil {
			return nil, nil, nil, err
		}
	}
	return missing, damaged, next, nil
}

// indexChunk reads up to n entries of a customer index (events or
// decisions) from lo, up to hi (the end of idx.span's span of one
// customer): the ids they name, and where the next chunk starts (nil after
// the last).
func (s *Service) indexChunk(r store.Reader, tenant string, idx customerIndex, lo, hi []byte, n int) (ids []string, next []byte, err error) {
	err = r.Scan(lo, hi, func(k, _ []byte) error {
		if _, _, id, ok := idx.parse(tenant, k); ok {
			ids = append(ids, id)
		}
		if len(ids) >= n {
			next = append(bytes.Clone(k), 0)
			return store.ErrStop
		}
		return nil
	})
	return ids, next, err
}
