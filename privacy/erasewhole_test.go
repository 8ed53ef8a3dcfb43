package privacy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store"
)

// TestErasureLeavesDamagedRecordsOfLongerRefs: a damaged access-log entry
// and a damaged held event batch are erased with a customer only when
// their bytes name her as a whole identifier, as the quarantine's records
// are (engine's namesRef): erasing ana-0000001 must not take the damaged
// records of ana-00000012, whose cliente_ref merely starts with hers, and
// must take those that name her.
func TestErasureLeavesDamagedRecordsOfLongerRefs(t *testing.T) {
	_, p, db, _ := newTest(t, 1)
	const ana, anaLonger = "ana-0000001", "ana-00000012"
	damaged := func(ref string) []byte {
		return []byte(`{"at":"2026-11-02T12:00:00Z","cliente_ref":"` + ref + `","tra`)
	}
	records := map[string][]byte{
		"access log, longer ref": store.AccessLogKey("acme", t0.Add(time.Second), "tr-1"),
		"access log, hers":       store.AccessLogKey("acme", t0.Add(2*time.Second), "tr-2"),
		"held batch, longer ref": store.QuarantineKey("acme", t0.Add(time.Second), "tr-3"),
		"held batch, hers":       store.QuarantineKey("acme", t0.Add(2*time.Second), "tr-4"),
	}
	b := db.NewBatch()
	defer b.Close()
	b.Set(records["access log, longer ref"], damaged(anaLonger))
	b.Set(records["access log, hers"], damaged(ana))
	b.Set(records["held batch, longer ref"], []byte(`{"client_id":"ci","eventos":[{"cliente_ref":"`+anaLonger+`",`))
	b.Set(records["held batch, hers"], []byte(`{"client_id":"ci","eventos":[{"cliente_ref":"`+ana+`",`))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	deleteAll(t, p, ana)
	want := map[string]bool{"access log, longer ref": true, "access log, hers": false,
		"held batch, longer ref": true, "held batch, hers": false}
	got := map[string]bool{}
	for name, k := range records {
		_, err := db.Get(k)
		got[name] = err == nil
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("damaged records kept after erasing %s (-want +got):\n%s", ana, diff)
	}
}
