package policy

import (
	"math"
	"testing"
)

// FuzzUnmarshal: a stored model, however damaged, decodes to an error or
// to a model that scores and decides with finite probabilities summing to
// 1 and marshals again; never a panic.
func FuzzUnmarshal(f *testing.F) {
	fresh, err := New(DefaultConfig()).Marshal("v0")
	if err != nil {
		f.Fatal(err)
	}
	w := newWorld(13, 300, threeActions())
	m := New(DefaultConfig())
	for i := 1; i <= 2; i++ {
		w.runWindow(m, week(i))
	}
	trained, err := m.Marshal("v2")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fresh)
	f.Add(trained)
	f.Add([]byte(`{"format":5}`))
	sc := w.custs[0]
	arms := w.arms(sc)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _, err := Unmarshal(data, DefaultConfig())
		if err != nil {
			return
		}
		s := make([]Score, len(arms))
		p := make([]float64, len(arms))
		m.Score(&sc.c, arms, s)
		m.Distribution(s, p)
		var sum float64
		for i, x := range p {
			if !finite([]float64{s[i].Mu, s[i].Width, m.Sigma(&s[i])}) {
				t.Fatalf("score %+v (σ %v) from a decoded model", s[i], m.Sigma(&s[i]))
			}
			if math.IsNaN(x) || x < 0 || x > 1 {
				t.Fatalf("probabilities %v from a decoded model", p)
			}
			sum += x
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Fatalf("probabilities sum to %v: %v", sum, p)
		}
		if _, err := m.Marshal("again"); err != nil {
			t.Fatalf("a decoded model does not marshal: %v", err)
		}
	})
}
