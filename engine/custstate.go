package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/coupond/coupond/store"
)

// rebuildCustomerState answers for ref's decision state damaged, which did
// not decode (cause): it is quarantined and replaced, in the same batch, by
// the state rebuilt from ref's stored decisions (customerStateFromDecisions).
// Read as a customer without open window or requests today, she would get
// a second live decision inside an open reward window and a fresh daily
// cap (contract §8: a damaged record is read conservatively).
//
// The caller holds ref's customer lock (tenantState.custLock), as every
// writer of a customer state does (decisions online and in batches,
// VoidJob, erasure under LockCustomer): no write of ref's state or
// decisions that open a window can come between the read of damaged and
// the commit of its replacement (loadCustomerState with locked).
func (e *Engine) rebuildCustomerState(tenant, ref string, damaged []byte, cause error) (customerState, error) {
	cs, err := e.customerStateFromDecisions(tenant, ref)
	if err != nil {
		return customerState{}, err
	}
	cause = fmt.Errorf("%w (rebuilt from the customer's decisions)", cause)
	// A failed quarantine is logged; the damaged record stays for the next reader.
	_ = e.quarantineAs(tenant, customerStateKey(tenant, ref), damaged, cause, marshalCustomerState(&cs))
	return cs, nil
}

// customerStateFromDecisions rebuilds ref's decision state from her
// decision index (store.CustomerDecisionSpan), latest first:
//
//   - OpenNonce and OpenAt are those of her latest decision that opened a
//     reward window: every decision decideInto made, control group and
//     accion 0 included, but neither fallback records (which open none)
//     nor batch decisions VoidJob voided (which stopped holding theirs).
//     A decision whose record is damaged or gone is of unknown kind and
//     read as one that opened a window: no coupon is sent while it would
//     be open, and its id is the one given back.
//   - Day is the UTC day of her latest online decision (neither a fallback
//     record nor a batch line, which take none of the daily cap), and
//     Count the number of those on that day, the day of the open decision
//     when one is open. That is a lower bound of the count the damaged
//     state held: the requests answered with an open window's decision
//     also counted toward the daily cap, and they left no record.
func (e *Engine) customerStateFromDecisions(tenant, ref string) (customerState, error) {
	type entry struct {
		at    time.Time
		nonce string
	}
	var idx []entry
	lo, hi := store.CustomerDecisionSpan(tenant, ref)
	err := e.db.Scan(lo, hi, func(k, _ []byte) error {
		if r, at, nonce, ok := store.ParseCustomerDecisionKey(tenant, k); ok && r == ref {
			idx = append(idx, entry{at, nonce})
		}
		return nil
	})
	if err != nil {
		return customerState{}, err
	}
	var cs customerState
	var openDay string
	for i := len(idx) - 1; i >= 0; i-- {
		day := idx[i].at.UTC().Format(time.DateOnly)
		if cs.OpenNonce != "" && day != openDay {
			break
		}
		counts, opens, at, err := e.decisionOpensWindow(tenant, ref, idx[i].nonce)
		if err != nil {
			return customerState{}, err
		}
		if counts {
			if cs.Day == "" {
				cs.Day = day
			}
			if day == cs.Day {
				cs.Count++
			}
		}
		if opens && cs.OpenNonce == "" {
			cs.OpenNonce, cs.OpenAt, openDay = idx[i].nonce, idx[i].at, day
			if !at.IsZero() {
				cs.OpenAt = at
			}
		}
	}
	return cs, nil
}

// decisionOpensWindow tells of ref's indexed decision nonce whether it
// counted toward her daily cap (online decisions: neither fallback records
// nor batch lines; a damaged or missing record is read as one that did) and whether it
// opened a reward window still held (not voided), with its time when its
// record loads (zero for a damaged or missing record, read as one that
// opened a window).
func (e *Engine) decisionOpensWindow(tenant, ref, nonce string) (counts, opens bool, at time.Time, err error) {
	r, err := e.loadDecision(tenant, nonce)
	switch {
	case errors.Is(err, ErrNotFound): // damaged (now quarantined) or gone
		return true, true, time.Time{}, nil
	case err != nil:
		return false, false, time.Time{}, err
	case r.ClienteRef != ref || r.EnRespaldo:
		return false, false, time.Time{}, nil
	}
	return r.JobID == "", !r.Anulada, r.At, nil
}
