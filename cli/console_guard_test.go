package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/console"
	"github.com/coupond/coupond/policy"
)

// TestGuardState: the console shows which policy a tenant runs, whether
// its send gate tests or sends the learned policy's choices (per band),
// and marks an active guard with the baseline it exploits. Before any
// reward is learned, or any decision tested by the gate, it says so in
// words (it showed estimates of 0.00 MXN).
func TestGuardState(t *testing.T) {
	tests := []struct {
		name string
		in   policy.GuardStatus
		want console.GuardState
	}{
		{"learned", policy.GuardStatus{Policy: 12.5, Rewards: 300, Baselines: []policy.BaselineStatus{{Accion: 0, Value: 10, Diff: 2.5, SE: new(1.0)}}},
			console.GuardState{State: "off, the learned policy decides",
				Detail: "the learned policy is estimated at 12.50 MXN per decision over 300 effective rewards; 0 switch(es); never-send 10.00 MXN (policy +2.50 ± 1.00)"}},
		{"never-send", policy.GuardStatus{Active: true, Switches: 1, Policy: 8, Rewards: 40},
			console.GuardState{State: "active, exploiting never-send",
				Detail: "the learned policy is estimated at 8.00 MXN per decision over 40 effective rewards; 1 switch(es)", Alert: true}},
		{"single action", policy.GuardStatus{Active: true, Baseline: 3, Switches: 2, Baselines: []policy.BaselineStatus{{Accion: 3, Value: 5, Diff: -1, SE: new(0.4)}}},
			console.GuardState{State: "active, exploiting always action 3",
				Detail: "the learned policy has no estimate yet (no reward of a live decision folded; shadow decisions teach the model, not the guard); 2 switch(es); always action 3 5.00 MXN (policy -1.00 ± 0.40)", Alert: true}},
		{"a baseline's standard error not estimated yet", policy.GuardStatus{Policy: 4, Rewards: 1, Baselines: []policy.BaselineStatus{{Accion: 0, Value: 3}}},
			console.GuardState{State: "off, the learned policy decides",
				Detail: "the learned policy is estimated at 4.00 MXN per decision over 1 effective rewards; 0 switch(es); never-send 3.00 MXN (policy +0.00 ± n/a)"}},
		{"gate open", policy.GuardStatus{Policy: 9, Rewards: 500, Gate: &policy.GateStatus{State: "abierta", Diff: 3, SE: new(1.2), N: 400,
			Bands: []policy.GateBandStatus{{Tickets: "0-1", State: "probando", Sending: 0.05}, {Tickets: "2-7", State: "abierta", Sending: 0.9}}}},
			console.GuardState{State: "off, the send gate is open: the learned policy's choices go out",
				Detail: "the learned policy is estimated at 9.00 MXN per decision over 500 effective rewards; 0 switch(es); send gate abierta: choice − never-send +3.00 MXN (SE 1.20); 0-1 tickets a year probando, 5 % of choices sent; 2-7 tickets a year abierta, 90 % of choices sent"}},
		{"gate testing", policy.GuardStatus{Gate: &policy.GateStatus{State: "probando"}},
			console.GuardState{State: "off, the send gate tests the learned policy's choices against never-send",
				Detail: "the learned policy has no estimate yet (no reward of a live decision folded; shadow decisions teach the model, not the guard); 0 switch(es); send gate probando: no decision tested against never-send yet"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, guardState(tt.in)); diff != "" {
				t.Errorf("guardState (-want +got):\n%s", diff)
			}
		})
	}
}
