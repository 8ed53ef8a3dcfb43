package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/policy"
)

// TestPrintGuardShowsLadder: admin evaluate and admin tenant show print
// the send rule's ladder under the guard when there is one: the rung in
// use, marked, and every rung's estimates; nothing without one.
func TestPrintGuardShowsLadder(t *testing.T) {
	g := policy.GuardStatus{Policy: 12.5, Rewards: 900, Ladder: &policy.LadderStatus{Rung: 1, Z: 0.5, Moves: 1,
		Rungs: []policy.RungStatus{{Z: 1.5, OverNever: 0.1, NeverSE: 0.2, Diff: -3, DiffSE: 1},
			{Z: 0.5, OverNever: 3.1, NeverSE: 1.2, MeanWeight: 4.5, MaxWeight: 9.8},
			{Z: 0, OverNever: 2, NeverSE: -1, Diff: -1.1, DiffSE: -1, MeanWeight: 20, MaxWeight: 56}}}}
	var b strings.Builder
	printGuard(&b, g)
	want := `policy guard: inactive  switches 0  learned policy 12.50 MXN  effective rewards 900
send rule ladder: rung 1 (send when effect − 0.50 SE > 0)  moves 1
   rung 0 (Z 1.50): over never-send +0.10 MXN (SE 0.20)  − rung in use -3.00 (SE 1.00)  importance weight mean 0.0 max 0.0
 * rung 1 (Z 0.50): over never-send +3.10 MXN (SE 1.20)  − rung in use +0.00 (SE 0.00)  importance weight mean 4.5 max 9.8
   rung 2 (Z 0.00): over never-send +2.00 MXN (SE n/a)  − rung in use -1.10 (SE n/a)  importance weight mean 20.0 max 56.0
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printGuard (-want +got):\n%s", diff)
	}
	b.Reset()
	g.Ladder = nil
	printGuard(&b, g)
	if strings.Contains(b.String(), "ladder") {
		t.Errorf("no ladder, but printed: %q", b.String())
	}
}

// TestPrintGuardShowsGate: admin evaluate and admin tenant show print the
// send gate under the guard: its state, its test over all customers and
// each frequency band's state, sending share and test.
func TestPrintGuardShowsGate(t *testing.T) {
	g := policy.GuardStatus{Policy: 12.5, Rewards: 900, Gate: &policy.GateStatus{State: "abierta", Diff: 3.2, SE: 1.1, N: 4000,
		Bands: []policy.GateBandStatus{{Tickets: "0-1", State: "probando", Diff: -0.4, SE: 2, N: 900, Sending: 0.25},
			{Tickets: "2-7", State: "abierta", Diff: 5.5, SE: 1.5, N: 3100, Sending: 0.9},
			{Tickets: "8-25", State: "probando", SE: -1, Sending: 0.25}}}}
	var b strings.Builder
	printGuard(&b, g)
	want := `policy guard: inactive  switches 0  learned policy 12.50 MXN  effective rewards 900
send gate: abierta  choice − never-send +3.20 MXN (SE 1.10) over 4000 effective decisions
  band 0 (0-1 tickets a year): probando  sends 25 % of the coupon choices  choice − never-send -0.40 MXN (SE 2.00) over 900
  band 1 (2-7 tickets a year): abierta  sends 90 % of the coupon choices  choice − never-send +5.50 MXN (SE 1.50) over 3100
  band 2 (8-25 tickets a year): probando  sends 25 % of the coupon choices  choice − never-send +0.00 MXN (SE n/a) over 0
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("printGuard (-want +got):\n%s", diff)
	}
}
