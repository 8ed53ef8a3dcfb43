package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRefCursor walks, seeks and exact-seeks the customer states of one
// tenant, never seeing another tenant's or another table's keys.
func TestRefCursor(t *testing.T) {
	db, _ := openMem(t)
	b := db.NewBatch()
	for _, ref := range []string{"ana", "beto", "carla"} {
		b.Set(CustomerStateKey("acme", ref), []byte("s-"+ref))
		b.Set(FeaturesKey("acme", ref), []byte("f-"+ref))
	}
	b.Set(CustomerStateKey("acme2", "ana"), []byte("other tenant"))
	b.Set(HourlyKey("acme", 1), []byte("{}"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	c, err := db.CustomerStateCursor("acme")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var walked []string
	for ok := c.Valid(); ok; ok = c.Next() {
		v, err := c.Value()
		if err != nil {
			t.Fatal(err)
		}
		walked = append(walked, string(c.Ref())+"="+string(v))
	}
	if diff := cmp.Diff([]string{"ana=s-ana", "beto=s-beto", "carla=s-carla"}, walked); diff != "" {
		t.Errorf("walk (-want +got):\n%s", diff)
	}
	if !c.Seek([]byte("b")) || string(c.Ref()) != "beto" {
		t.Errorf("Seek(b): want beto")
	}
	if c.SeekExact([]byte("bet")) {
		t.Errorf("SeekExact(bet): found a record of another ref")
	}
	if !c.SeekExact([]byte("carla")) {
		t.Errorf("SeekExact(carla): not found")
	}
	if c.Seek([]byte("zz")) {
		t.Errorf("Seek past the end: still valid")
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	if m := db.Metrics(); m.DiskBytes == 0 && m.MemtableBytes == 0 {
		t.Errorf("Metrics: empty snapshot %+v", m)
	}
}
