package server

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
	"github.com/coupond/coupond/store"
)

// quarantined is one request's events held in quarantine (TableQuarantine,
// key = arrival time, trace id): their canonical JSON, to be validated and
// applied again on release.
type quarantined struct {
	ClientID string            `json:"client_id"`
	Events   []json.RawMessage `json:"eventos"`
}

func (s *Server) quarantine(c *call, good []engine.IngestEvent) error {
	q := quarantined{ClientID: c.clientID}
	for _, ev := range good {
		q.Events = append(q.Events, json.RawMessage(ev.Canonical))
	}
	b := s.DB.NewBatch()
	defer b.Close()
	if err := b.SetJSON(store.QuarantineKey(c.tenant.ID, c.start, c.trace), &q); err != nil {
		return err
	}
	return b.Commit()
}

// QuarantineRelease applies every quarantined event of tenant (idempotently,
// as if posted now) and removes them from quarantine. It returns how many
// were accepted and how many were duplicates.
func (s *Server) QuarantineRelease(tenant string, now time.Time) (accepted, duplicates int, err error) {
	lo, hi := store.QuarantineSpan(tenant)
	var keys [][]byte
	var all []engine.IngestEvent
	err = s.DB.Scan(lo, hi, func(k, v []byte) error {
		var q quarantined
		if err := json.Unmarshal(v, &q); err != nil {
			return err
		}
		keys = append(keys, append([]byte(nil), k...))
		for _, raw := range q.Events {
			val, err := schema.Parse(raw)
			if err != nil {
				return fmt.Errorf("quarantined event: %w", err)
			}
			ev, rej := s.checkEventOf(tenant, len(all), val, now, false)
			if rej != nil {
				continue
			}
			all = append(all, ev)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	for len(all) > 0 {
		n := min(len(all), 1000)
		res, err := s.Engine.Ingest(tenant, all[:n])
		if err != nil {
			return accepted, duplicates, err
		}
		accepted, duplicates = accepted+res.Aceptados, duplicates+res.Duplicados
		all = all[n:]
	}
	b := s.DB.NewBatch()
	defer b.Close()
	for _, k := range keys {
		b.Delete(k)
	}
	return accepted, duplicates, b.Commit()
}

// QuarantineCount is how many requests wait in quarantine.
func (s *Server) QuarantineCount(tenant string) int {
	n := 0
	lo, hi := store.QuarantineSpan(tenant)
	s.DB.Scan(lo, hi, func(_, _ []byte) error { n++; return nil })
	return n
}
