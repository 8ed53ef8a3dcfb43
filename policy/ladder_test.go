package policy

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// feedLadder adds n decisions to the ladder's sums: rung i's pseudo-
// outcome against never-send is mean[i] plus noise of SD sd (shared by
// every rung, as paired outcomes are, plus a rung's own part of SD sd/2);
// every rung other than the current one is drawn where it differs hits
// times in all.
func feedLadder(l *Ladder, rng *rand.Rand, n int, mean []float64, sd, hits float64) {
	for range n {
		common := rng.NormFloat64() * sd
		l.W++
		l.W2++
		var d [maxRungs]float64
		for i, m := range mean {
			d[i] = m + common + rng.NormFloat64()*sd/2
		}
		for i := range mean {
			l.S[i] += d[i]
			for j := range mean {
				l.Q[i*maxRungs+j] += d[i] * d[j]
			}
		}
	}
	for i := range mean {
		l.H[i] += hits
	}
}

// TestLadderMoves: the ladder moves toward less pessimism only when a
// rung beats the current one and never-send with confidence, with enough
// draws of its own choices; it moves back when the current rung loses to
// the one before it or to never-send; noise moves nothing.
func TestLadderMoves(t *testing.T) {
	cfg := ZRuleConfig()
	cfg.Ladder = []float64{1.5, 1, 0.5, 0}
	cfg.LadderUpZ, cfg.LadderDownZ, cfg.LadderMinN, cfg.LadderMinHits = 2, 1, 200, 30
	tests := []struct {
		name  string
		start int
		mean  []float64 // per rung, cents against never-send
		hits  float64
		want  LadderEvent
		rung  int
	}{
		{"the next rung wins with confidence", 0, []float64{0, 300, 100, -200}, 100, LadderForward, 1},
		{"one rung at a time", 0, []float64{0, 300, 400, 500}, 100, LadderForward, 1},
		{"noise moves nothing", 0, []float64{0, 10, 5, -5}, 100, LadderUnchanged, 0},
		{"too few draws of the rung's own choices", 0, []float64{0, 300, 300, 300}, 10, LadderUnchanged, 0},
		{"beats the current rung but not never-send", 0, []float64{-900, -500, -400, -300}, 100, LadderUnchanged, 0},
		{"the current rung loses to the one before", 2, []float64{0, 200, -200, -400}, 100, LadderBack, 1},
		{"the current rung loses to never-send", 1, []float64{-300, -400, -800, -900}, 100, LadderBack, 0},
		{"the current rung holds", 2, []float64{0, 100, 300, 250}, 100, LadderUnchanged, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := New(cfg)
			m.guard.Ladder.Rung = tc.start
			feedLadder(&m.guard.Ladder, rand.New(rand.NewPCG(1, 2)), 3000, tc.mean, 3000, tc.hits)
			ev := m.UpdateLadder()
			got := []int{int(ev), m.LadderStatus().Rung}
			if diff := cmp.Diff([]int{int(tc.want), tc.rung}, got); diff != "" {
				t.Errorf("event, rung (-want +got):\n%s\nstatus %+v", diff, m.LadderStatus())
			}
		})
	}
}

// TestLadderOffIsFixedZ: without a ladder the send rule's width is Z and
// there is no ladder to report.
func TestLadderOffIsFixedZ(t *testing.T) {
	cfg := ZRuleConfig()
	cfg.Ladder = nil
	m := New(cfg)
	if m.sendZ() != cfg.Z || m.LadderStatus() != nil || m.UpdateLadder() != LadderUnchanged {
		t.Fatalf("ladder off: Z %v (want %v), status %+v", m.sendZ(), cfg.Z, m.LadderStatus())
	}
}

// BenchmarkLadder measures what the ladder adds to a decision (Score and
// Distribution) and to the guard's Observe of one logged decision, with
// the ladder off and on.
func BenchmarkLadder(b *testing.B) {
	for _, on := range []bool{false, true} {
		cfg := ZRuleConfig()
		name := "off"
		if on {
			cfg.Ladder, name = DefaultLadder(), "on"
		}
		w := newWorld(10, 2000, threeActions())
		m := New(cfg)
		w.runWindow(m, week(1))
		sc := w.custs[0]
		arms := w.arms(sc)
		s := make([]Score, len(arms))
		p := make([]float64, len(arms))
		m.Score(&sc.c, arms, s)
		m.Distribution(s, p)
		q := make([]float64, len(arms))
		for i := range s {
			q[i] = s[i].Mu
		}
		gs := &GuardSample{Customer: sc.c, Arms: arms, Probs: p, QHat: q, Logged: 1, Reward: 5000, Options: []int{0}}
		b.Run("decide/"+name, func(b *testing.B) {
			for range b.N {
				m.Score(&sc.c, arms, s)
				m.Distribution(s, p)
			}
		})
		b.Run("observe/"+name, func(b *testing.B) {
			for range b.N {
				m.Observe(gs)
			}
		})
	}
}

// TestLadderSurvivesMarshal: the ladder's rung and evidence are stored
// with the model and read back as they were.
func TestLadderSurvivesMarshal(t *testing.T) {
	cfg := ZRuleConfig()
	cfg.Ladder = DefaultLadder()
	w := newWorld(4, 1500, threeActions())
	m := New(cfg)
	for i := 1; i <= 2; i++ {
		w.runWindow(m, week(i))
		m.UpdateLadder()
	}
	m.guard.Ladder.Rung = 1
	b, err := m.Marshal("v1")
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Unmarshal(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m.LadderStatus(), got.LadderStatus()); diff != "" || got.LadderStatus().Rungs[2].MaxWeight == 0 {
		t.Errorf("ladder after a round trip (-want +got):\n%s\n%+v", diff, got.LadderStatus())
	}
}
