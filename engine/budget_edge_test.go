package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestDamagedBudgetAfterCapsLowered: a budget record lost to damage reads
// as spent at the highest caps the campaign had, not at the caps it has
// now: lowered below the spend since, they read the spend short, and the
// sends given back afterwards (rejected, expired) let the campaign send
// past its cap. It read at the current caps: 4 sent under a cap of 4, the
// cap lowered to 2, the record damaged, 2 sends rejected: 2 more went, 4
// outstanding against a cap of 2.
func TestDamagedBudgetAfterCapsLowered(t *testing.T) {
	put := func(t *testing.T, e *Engine, maxEnvios int64) {
		t.Helper()
		if _, err := e.Campaigns.PutCampaign("acme", Campaign{ID: "c1", Canal: "push", Descripcion: "d", MaxEnvios: &maxEnvios}, t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		caps  []int64 // PUT after the sends, in order
		read  int64   // envios the damaged budget reads as
		sends int     // new sends after 2 of the 4 are rejected
	}{
		{"cap kept", nil, 4, 2},
		{"cap lowered", []int64{2}, 4, 0},
		{"cap lowered twice", []int64{3, 1}, 4, 0},
		{"cap raised, then lowered", []int64{6, 2}, 6, 0},
		{"cap lowered, then raised", []int64{2, 5}, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, nil)
			ids := campaignSends(t, e, 4, 4)
			for _, c := range tc.caps {
				put(t, e, c)
			}
			damage(t, db, store.BudgetKey("acme", "c1"), `{"envios":`)
			e = restart(db)
			if _, err := e.Decide("acme", Request{ClienteRef: "dmg-first", Canal: "push", CampanaID: "c1"}); err != nil {
				t.Fatal(err)
			}
			got := struct {
				Read  int64
				Sends int
			}{Read: storedBudget(t, db).Envios}
			for _, id := range ids[:2] {
				if _, err := e.Confirm("acme", id, Confirmation{Ejecutada: false, MotivoRechazo: "no"}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 400 {
				d, err := e.Decide("acme", Request{ClienteRef: fmt.Sprintf("after-%03d", i), Canal: "push", CampanaID: "c1"})
				if err != nil {
					t.Fatal(err)
				}
				if d.Accion != 0 {
					got.Sends++
				}
			}
			want := struct {
				Read  int64
				Sends int
			}{tc.read, tc.sends}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("damaged budget (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClockBackAcrossMidnight: a tenant clock set back across midnight
// (and forward again) counts each day's use against that day: neither the
// tenant's daily quota nor a customer's daily cap lets a day go past its
// limit, no count acknowledged on a day is lost by the move (nor by a flush
// and a new engine), and no request fails. The tenant's quota was right
// already (its counts are per day); a customer's count was of one day,
// started from 0 on any other: set back to a day she had used 2 of, she got
// 3 more, and 3 more again when the clock was back on the later day. A
// clock set back now counts against the later day's count.
func TestClockBackAcrossMidnight(t *testing.T) {
	dayAfter := t0.Truncate(24 * time.Hour).Add(24 * time.Hour)
	for _, tc := range []struct {
		name  string
		quota int64                 // the tenant's daily decisions
		refs  func(s, i int) string // the customer of try i of step s
		want  []int                 // answers per step
	}{
		{"tenant quota", 4, func(s, i int) string { return fmt.Sprintf("q-%d-%d", s, i) }, []int{2, 4, 2, 0, 0}},
		{"customer cap", 0, func(int, int) string { return "same-customer" }, []int{2, 3, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, db := newTestEngine(t, 1, func(s *store.Settings) { s.QuotaDecisionsDay = tc.quota })
			steps := []struct {
				at    time.Time
				tries int
			}{
				{t0, 2}, // day D: 2
				{dayAfter.Add(30 * time.Minute), 4},
				{dayAfter.Add(-30 * time.Minute), 4}, // back to D
				{dayAfter.Add(time.Hour), 4},         // D+1 again
				{dayAfter.Add(2 * time.Hour), 4},     // after a flush, a new engine
			}
			var got []int
			for s, step := range steps {
				if _, err := db.UpdateTenant("acme", func(tn *store.Tenant) error { tn.ClockNow = step.at; return nil }); err != nil {
					t.Fatal(err)
				}
				if s == len(steps)-1 {
					if err := e.Quotas.FlushQuotas(); err != nil {
						t.Fatal(err)
					}
					e = restart(db)
				}
				answered := 0
				for i := range step.tries {
					tn, ok := db.Tenant("acme")
					if !ok {
						t.Fatal("no tenant acme")
					}
					if err := e.Quotas.CheckQuota(tn, QuotaDecisions, tn.Now(t0)); errors.Is(err, ErrQuota) {
						continue
					} else if err != nil {
						t.Fatalf("step %d: quota: %v", s, err)
					}
					switch _, err := e.Decide("acme", Request{ClienteRef: tc.refs(s, i), Canal: "push"}); {
					case err == nil:
						answered++
					case !errors.Is(err, ErrDailyCap):
						t.Fatalf("step %d: decision: %v", s, err)
					}
				}
				got = append(got, answered)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answers per step (-want +got):\n%s", diff)
			}
		})
	}
}
