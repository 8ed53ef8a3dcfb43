package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestShadowVerdictReasons: the verdict's reasons (sorted) name what is
// missing; a share of nothing is "none yet", not "only 0.0 %".
func TestShadowVerdictReasons(t *testing.T) {
	tests := []struct {
		name string
		rep  ShadowReport
		want []string
	}{
		{"nothing yet", ShadowReport{}, []string{
			"0 final rewards (needs at least 200 for a comparison)",
			"no coupon reported received yet (CUPON_RECIBIDO events, each with its decision_id)",
			"no shadow decisions yet",
		}},
		{"unconfirmed and unlabelled", ShadowReport{Decisions: 10, Confirmed: 5, CouponsReceived: 4, CouponsLabelled: 1, RewardsFinal: 10}, []string{
			"10 final rewards (needs at least 200 for a comparison)",
			"only 25.0% of coupons carry a decision_id (needs at least 95%)",
			"only 50.0% of decisions confirmed (needs at least 95%)",
		}},
		{"ready", ShadowReport{Decisions: 300, Confirmed: 300, CouponsReceived: 100, CouponsLabelled: 100, RewardsFinal: 250,
			CallerRule: MeasuredValue{Mean: 1}, Engine: MeasuredValue{Mean: 2}, Lift: MeasuredValue{Mean: 1, Lo: 0.5, Hi: 1.5}}, nil},
		{"lead within the noise", ShadowReport{Decisions: 300, Confirmed: 300, CouponsReceived: 100, CouponsLabelled: 100, RewardsFinal: 250,
			CallerRule: MeasuredValue{Mean: 1}, Engine: MeasuredValue{Mean: 2}, Lift: MeasuredValue{Mean: 1, Lo: -0.5, Hi: 2.5}}, []string{
			"the engine's estimated value 2.00 MXN does not beat the caller's rule 1.00 MXN (difference 1.00 MXN, 95% interval [-0.50, 2.50])",
		}},
	}
	for _, tt := range tests {
		rep := tt.rep
		tally := shadowTally{rep: &rep}
		tally.finish()
		rep.CallerRule, rep.Engine, rep.Lift = tt.rep.CallerRule, tt.rep.Engine, tt.rep.Lift // finish reads them from the tally
		rep.judge()
		if diff := cmp.Diff(tt.want, rep.Reasons); diff != "" {
			t.Errorf("%s: reasons (-want +got):\n%s", tt.name, diff)
		}
		if rep.Ready != (tt.want == nil) {
			t.Errorf("%s: ready %v", tt.name, rep.Ready)
		}
	}
}
