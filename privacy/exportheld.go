package privacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// Events of a credential at the abuse guard's quarantine step are accepted
// (the request counts them in "aceptados") and held, not applied, until
// the operator releases them (engine.Ingester.Receive). The engine holds
// them, so the customer's export lists them too, after the stored ones;
// the customer's deletion erases them (erasure.quarantinedEvents).

// exportHeldEvents calls emit with each of the customer's held events,
// oldest request first, a held batch at a time. A batch that does not
// decode goes to quarantine (its bytes name the customer: en_cuarentena
// counts it).
func (s *Service) exportHeldEvents(r store.Reader, tenant, ref string, emit func(*client.EventoExportado) error) error {
	if s.heldEvent == nil {
		return nil
	}
	var keys [][]byte // the batches that may hold the customer's events
	lo, hi := store.QuarantineSpan(tenant)
	if err := r.Scan(lo, hi, func(k, v []byte) error {
		if bytes.Contains(v, []byte(ref)) {
			keys = append(keys, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		v, err := r.Get(k)
		if errors.Is(err, store.ErrNotFound) {
			continue // released or erased since the scan (r the live store; a snapshot does not change)
		}
		if err != nil {
			return err
		}
		evs, err := heldEventsOf(v, ref, s.heldEvent)
		if err != nil {
			s.rec.Quarantine(tenant, k, v, fmt.Errorf("held event batch: %w", err))
			continue
		}
		for i := range evs {
			if err := emit(&evs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// heldEventsOf decodes the held batch v and returns the events of ref in
// the export's form, as exportEvent writes a stored one. decode converts a
// held event as its release would (Config.HeldEvent): an event it refuses
// is one the release drops, never applied, and is left out; an error
// means the batch is damaged.
func heldEventsOf(v []byte, ref string, decode func([]byte) (engine.Event, bool, error)) ([]client.EventoExportado, error) {
	var h store.HeldBatch
	if err := json.Unmarshal(v, &h); err != nil {
		return nil, err
	}
	var out []client.EventoExportado
	for _, raw := range h.Events {
		ev, ok, err := decode(raw)
		if err != nil {
			return nil, err
		}
		if ok && ev.ClienteRef == ref {
			out = append(out, exportEvent(&ev))
		}
	}
	return out, nil
}
