package policy

import (
	"encoding/json"
	"testing"
)

// trainedStored is the stored form of a model trained for two windows.
func trainedStored(t *testing.T) []byte {
	t.Helper()
	w := newWorld(13, 300, threeActions())
	m := New(DefaultConfig())
	for i := 1; i <= 2; i++ {
		w.runWindow(m, week(i))
	}
	b, err := m.Marshal("v2")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fields is a stored form as generic JSON, to damage in place.
func fields(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// obj is v["k1"]["k2"]… of a stored form.
func obj(v map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		v = v[k].(map[string]any)
	}
	return v
}

// eachBand calls fn with every gate band of the stored guard.
func eachBand(t *testing.T, f map[string]any, fn func(b map[string]any)) {
	bands, _ := obj(f, "guard")["gate_bands"].([]any)
	if len(bands) == 0 {
		t.Fatal("the trained model has no gate bands")
	}
	for _, b := range bands {
		fn(b.(map[string]any))
	}
}

// TestUnmarshalRefusesOutOfRange: a stored model whose numbers are finite
// but could never have been stored (a probability outside [0, 1], a sum of
// weights or squares below 0, an unknown gate state) is damage: Unmarshal
// gives an error, which the engine quarantines, rather than a model whose
// decisions log probabilities outside [0, 1] (a gate band's promise of 5
// made never-send's probability −1.4) or whose status holds NaN; so are
// finite statistics whose fit overflows (a residual sum of squares of
// 1e308 made the coupons' standard errors NaN), and negative counts (the
// rewards folded: −1e9 of them made ZRuleConfig's exploration share, and
// every probability, NaN).
func TestUnmarshalRefusesOutOfRange(t *testing.T) {
	trained := trainedStored(t)
	if _, _, err := Unmarshal(trained, DefaultConfig()); err != nil {
		t.Fatalf("the model before damage: %v", err)
	}
	for _, tc := range []struct {
		name string
		set  func(t *testing.T, f map[string]any)
	}{
		{"band promise above 1", func(t *testing.T, f map[string]any) {
			eachBand(t, f, func(b map[string]any) { b["promise"] = 5.0 })
		}},
		{"band promise below 0", func(t *testing.T, f map[string]any) {
			eachBand(t, f, func(b map[string]any) { b["promise"] = -0.5 })
		}},
		{"unknown band state", func(t *testing.T, f map[string]any) {
			eachBand(t, f, func(b map[string]any) { b["state"] = 7.0 })
		}},
		{"more bands than the gate has", func(t *testing.T, f map[string]any) {
			g := obj(f, "guard")
			bands := g["gate_bands"].([]any)
			g["gate_bands"] = append(bands, bands[0])
		}},
		{"band test: negative sum of squares", func(t *testing.T, f map[string]any) {
			eachBand(t, f, func(b map[string]any) { obj(b, "test")["s"] = -1e9 })
		}},
		{"residual variance that overflows the fit", func(t *testing.T, f map[string]any) { f["res_ss"] = 1e308 }},
		{"negative count of rewards", func(t *testing.T, f map[string]any) { f["n"] = -1e9 }},
		{"an action's negative count of rewards", func(t *testing.T, f map[string]any) {
			for _, a := range obj(f, "arms") {
				a.(map[string]any)["n"] = -2.0
			}
		}},
		{"policy sums: negative weight", func(t *testing.T, f map[string]any) { obj(f, "guard", "policy")["w2"] = -1.0 }},
		{"gate test: negative weight", func(t *testing.T, f map[string]any) { obj(f, "guard", "test")["w"] = -3.0 }},
		{"baseline sums: negative sum of squares", func(t *testing.T, f map[string]any) {
			for _, o := range obj(f, "guard", "options") {
				o.(map[string]any)["d2"] = -1.0
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fields(t, trained)
			tc.set(t, f)
			if _, _, err := Unmarshal(mustJSON(t, f), DefaultConfig()); err == nil {
				t.Error("loaded")
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
