package engine

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
	"github.com/coupond/coupond/store/storefs"
)

// storedModel is one of acme's stored model records.
type storedModel struct{ key, val []byte }

// storedModels returns acme's stored model records in key order: the
// records of the model table (store.KindOf), whatever their keys.
func storedModels(tb testing.TB, db *store.DB) []storedModel {
	tb.Helper()
	var out []storedModel
	lo, hi := store.TenantSpan("acme")
	if err := db.Scan(lo, hi, func(k, v []byte) error {
		if store.KindOf("acme", k) == store.KindModel {
			out = append(out, storedModel{bytes.Clone(k), bytes.Clone(v)})
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// storedValues are the values of storedModels, as strings for cmp.Diff.
func storedValues(tb testing.TB, db *store.DB) []string {
	tb.Helper()
	out := []string{}
	for _, m := range storedModels(tb, db) {
		out = append(out, string(m.val))
	}
	return out
}

// publishedBytes is the tenant's published model as the learner stores it.
func publishedBytes(tb testing.TB, e *Engine) string {
	tb.Helper()
	ts, err := e.state("acme")
	if err != nil {
		tb.Fatal(err)
	}
	b, err := ts.model.Load().marshal()
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// newLearningEngine is newTestEngineOn with a 24-hour reward window and
// no grace, so that rewardRound's rounds each store a model.
func newLearningEngine(t *testing.T, db *store.DB) *Engine {
	return newTestEngineOn(t, db, 2, func(s *store.Settings) { s.RewardWindow = 24 * time.Hour; s.RewardGrace = 0 })
}

var lastGoodEffect = map[int]int64{0: 0, 1: 800, 2: -500}

// TestDamagedModelFallsBackToLastGood: the learner keeps the model it
// stored before the newest, the last good one. When the newest does not
// decode, it alone is quarantined and the tenant goes on from the last
// good one (its contents, its version), which the status names; only when
// neither decodes does the tenant start again from the prior. Learning
// then goes on, and the store again holds the model in use and the new
// one. One damaged record used to throw away weeks of learning.
func TestDamagedModelFallsBackToLastGood(t *testing.T) {
	for _, tc := range []struct {
		name       string
		damaged    int    // the newest records damaged
		wantGood   bool   // the last good model loads (else the prior)
		fallback   string // Status.ModelFallback, %s the last good version
		restarted  string
		quarantine []string
	}{
		{"newest damaged", 1, true, "its newest stored model did not decode (quarantined); the last good one before it, politica_version %s, was loaded",
			"", []string{"model"}},
		{"both damaged", 2, false, "", "its stored model and the last good one before it did not decode (quarantined)", []string{"model", "model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := storeOpen(t, storefs.Mem())
			e := newLearningEngine(t, db)
			rewardRound(t, e, db, 1, 60, 3000, lastGoodEffect)
			good, goodVersion := publishedBytes(t, e), statusOf(t, e).PoliticaVersion
			rewardRound(t, e, db, 2, 60, 3000, lastGoodEffect)
			newest := publishedBytes(t, e)
			if diff := cmp.Diff([]string{good, newest}, storedValues(t, db)); diff != "" {
				t.Fatalf("stored models after two updates: the last good one and the newest (-want +got):\n%s", diff)
			}
			recs := storedModels(t, db)
			for _, r := range recs[len(recs)-tc.damaged:] {
				damage(t, db, r.key, `{"format":5,"phi":[1,2`)
			}

			e = restart(db)
			st := statusOf(t, e)
			prior, err := newPublishedModel(policy.DefaultConfig()).marshal()
			if err != nil {
				t.Fatal(err)
			}
			wantVersion, wantModel := "v0-prior", string(prior)
			if tc.wantGood {
				wantVersion, wantModel = goodVersion, good
			}
			wantFallback := tc.fallback
			if wantFallback != "" {
				wantFallback = fmt.Sprintf(wantFallback, goodVersion)
			}
			if st.PoliticaVersion != wantVersion || st.ModelRestarted != tc.restarted || st.ModelFallback != wantFallback {
				t.Errorf("status: version %s, restarted %q, fallback %q; want %s, %q, %q", st.PoliticaVersion, st.ModelRestarted, st.ModelFallback,
					wantVersion, tc.restarted, wantFallback)
			}
			if diff := cmp.Diff(wantModel, publishedBytes(t, e)); diff != "" {
				t.Errorf("model loaded (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.quarantine, quarantinedTables(t, e)); diff != "" {
				t.Errorf("quarantine: only the damaged models (-want +got):\n%s", diff)
			}

			rewardRound(t, e, db, 3, 60, 3000, lastGoodEffect)
			if st := statusOf(t, e); st.ModelFallback != "" || st.ModelRestarted != "" {
				t.Errorf("status after the next update: fallback %q, restarted %q; want neither", st.ModelFallback, st.ModelRestarted)
			}
			want := []string{publishedBytes(t, e)}
			if tc.wantGood {
				want = []string{good, want[0]}
			}
			if diff := cmp.Diff(want, storedValues(t, db)); diff != "" {
				t.Errorf("stored models after the next update (-want +got):\n%s", diff)
			}
		})
	}
}

// TestModelOfAnEarlierRelease: a model stored by a release before model
// generations (under the bare table key, generation 0) loads; the next
// update keeps it as the last good model, which loads when the newest is
// damaged; it stays the last good one through the update from it, and the
// update after that deletes it.
func TestModelOfAnEarlierRelease(t *testing.T) {
	db := storeOpen(t, storefs.Mem())
	e := newLearningEngine(t, db)
	rewardRound(t, e, db, 1, 60, 3000, lastGoodEffect)
	early, earlyVersion := publishedBytes(t, e), statusOf(t, e).PoliticaVersion
	b := db.NewBatch()
	for _, m := range storedModels(t, db) {
		b.Delete(m.key)
	}
	b.Set(store.ModelKey("acme", 0), []byte(early))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()

	e = restart(db)
	if diff := cmp.Diff(early, publishedBytes(t, e)); diff != "" {
		t.Fatalf("model of the earlier release loaded (-want +got):\n%s", diff)
	}
	rewardRound(t, e, db, 2, 60, 3000, lastGoodEffect)
	var keys []string
	for _, m := range storedModels(t, db) {
		keys = append(keys, string(m.key))
	}
	if diff := cmp.Diff([]string{string(store.ModelKey("acme", 0)), string(store.ModelKey("acme", 1))}, keys); diff != "" {
		t.Fatalf("stored after the next update: the earlier release's and generation 1 (-want +got):\n%s", diff)
	}
	damage(t, db, store.ModelKey("acme", 1), "not a model")
	e = restart(db)
	if st := statusOf(t, e); st.PoliticaVersion != earlyVersion || publishedBytes(t, e) != early {
		t.Errorf("newest damaged: version %s loaded, want the earlier release's %s", st.PoliticaVersion, earlyVersion)
	}
	rewardRound(t, e, db, 3, 60, 3000, lastGoodEffect)
	third := publishedBytes(t, e)
	if diff := cmp.Diff([]string{early, third}, storedValues(t, db)); diff != "" {
		t.Errorf("stored after the update from the earlier release's model: it and the new one (-want +got):\n%s", diff)
	}
	rewardRound(t, e, db, 4, 60, 3000, lastGoodEffect)
	if diff := cmp.Diff([]string{third, publishedBytes(t, e)}, storedValues(t, db)); diff != "" {
		t.Errorf("stored after the update after that (-want +got):\n%s", diff)
	}
}

// TestModelUpdatesSurviveACrash: a crash at any point of the learner's
// updates leaves the last good model and the newest (or, before the first
// update, the one stored): the store is cloned as a crash would leave it
// just before each pass commits and just after, and each clone must hold
// the models stored by then, the newest of which a restarted engine loads.
func TestModelUpdatesSurviveACrash(t *testing.T) {
	mem := storefs.CrashableMem()
	db := storeOpen(t, mem)
	e := newLearningEngine(t, db)
	type crash struct {
		name string
		fs   *storefs.MemFS
		want []string // the stored models it must hold, oldest first
	}
	var crashes []crash
	var saved []string // the models stored so far
	last2 := func() []string { return append([]string{}, saved[max(0, len(saved)-2):]...) }
	e.Learner.beforeCommit = func() {
		crashes = append(crashes, crash{"before update", mem.CrashClone(storefs.CrashCloneCfg{}), last2()})
	}
	for round := 1; round <= 4; round++ {
		rewardRound(t, e, db, round, 40, 3000, lastGoodEffect)
		saved = append(saved, publishedBytes(t, e))
		crashes = append(crashes, crash{"after update", mem.CrashClone(storefs.CrashCloneCfg{}), last2()})
	}
	for i, c := range crashes {
		cdb := storeOpen(t, c.fs)
		if diff := cmp.Diff(c.want, storedValues(t, cdb)); diff != "" {
			t.Errorf("crash %d (%s): stored models (-want +got):\n%s", i, c.name, diff)
		}
		if len(c.want) > 0 {
			if diff := cmp.Diff(c.want[len(c.want)-1], publishedBytes(t, restart(cdb))); diff != "" {
				t.Errorf("crash %d (%s): model loaded after it (-want +got):\n%s", i, c.name, diff)
			}
		}
	}
}

// storeOpen opens a store on fs, closed when the test ends.
func storeOpen(tb testing.TB, fs *storefs.MemFS) *store.DB {
	tb.Helper()
	db, err := store.Open("db", fs)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// statusOf is e's Status of acme.
func statusOf(tb testing.TB, e *Engine) Status {
	tb.Helper()
	st, err := e.Learner.Status("acme")
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// TestQuarantinedModelGenerationNotReused: a generation once quarantined
// is not stored again, also after a restart (the store no longer holds it
// as a model): a later model damaged in turn keeps a quarantine entry of
// its own instead of overwriting the first one's.
func TestQuarantinedModelGenerationNotReused(t *testing.T) {
	db := storeOpen(t, storefs.Mem())
	e := newLearningEngine(t, db)
	rewardRound(t, e, db, 1, 40, 3000, lastGoodEffect)
	rewardRound(t, e, db, 2, 40, 3000, lastGoodEffect)
	damage(t, db, store.ModelKey("acme", 2), "not a model")
	statusOf(t, restart(db)) // quarantines generation 2
	e = restart(db)
	rewardRound(t, e, db, 3, 40, 3000, lastGoodEffect)
	var keys []string
	for _, m := range storedModels(t, db) {
		keys = append(keys, string(m.key))
	}
	if diff := cmp.Diff([]string{string(store.ModelKey("acme", 1)), string(store.ModelKey("acme", 3))}, keys); diff != "" {
		t.Errorf("stored model keys after an update from the last good one (-want +got):\n%s", diff)
	}
	damage(t, db, storedModels(t, db)[1].key, "not a model either")
	e = restart(db)
	statusOf(t, e) // quarantines it
	if diff := cmp.Diff([]string{"model", "model"}, quarantinedTables(t, e)); diff != "" {
		t.Errorf("quarantine after a second damaged model (-want +got):\n%s", diff)
	}
}
