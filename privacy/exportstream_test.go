package privacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/jsonappend"
	"github.com/coupond/coupond/store"
)

// TestExportStreamsLongHistory: a customer with thousands of events (a
// point of sale's walk-in account) is exported a chunk of index entries
// at a time; the streamed document is valid JSON, holds every event
// exactly once, counts the damaged records, and is byte for byte the
// encoding of the document Export returns.
func TestExportStreamsLongHistory(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	const hot, n = "MOSTRADOR0001", 5000
	ingestFor(t, e, hot, "h", n)
	ingestFor(t, e, "vecina", "v", 3)
	plantBroken(t, e, p, db, hot) // a broken decision, a broken coupon event
	p.exportChunk = 7
	chunks := 0
	p.afterExportChunk = func() error { chunks++; return nil }
	write, err := p.ExportStream("acme", hot, "ci", "trace")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	// 5,001 index entries (the broken coupon event's included), 7 a
	// chunk; then one decision (the broken one), walked twice.
	if diff := cmp.Diff((n+1+6)/7+2, chunks); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	var x client.ExportacionCliente
	if err := json.Unmarshal(buf.Bytes(), &x); err != nil {
		t.Fatalf("streamed export is not JSON: %v", err)
	}
	seen := map[string]int{}
	for _, ev := range x.Eventos {
		seen[ev.EventID]++
	}
	want := map[string]int{}
	for i := range n {
		want[fmt.Sprintf("h-%d", i)] = 1
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("events exported (-want +got):\n%s", diff)
	}
	if x.EnCuarentena != 2 {
		t.Errorf("en_cuarentena = %d, want 2", x.EnCuarentena)
	}
	whole, err := p.Export("acme", hot, "ci", "trace")
	if err != nil {
		t.Fatal(err)
	}
	b, err := jsonappend.Marshal(whole)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, buf.Bytes()) {
		t.Errorf("streamed export differs from Export's document:\n%s", cmp.Diff(string(b), buf.String()))
	}
}

// decideMany makes n decisions for ref (the reward window shut, so that
// each request makes one) and confirms some: every third executed, every
// fifth refused with a reason.
func decideMany(tb testing.TB, e *engine.Engine, db *store.DB, ref string, n int) {
	tb.Helper()
	if _, err := db.UpdateTenant("acme", func(t *store.Tenant) error { t.Settings.RewardWindow = 0; return nil }); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		d, err := e.Decide("acme", engine.Request{ClienteRef: ref, Canal: "push", CapExempt: true})
		if err != nil {
			tb.Fatalf("decision %d: %v", i, err)
		}
		var c engine.Confirmation
		switch {
		case i%3 == 0:
			c.Ejecutada = true
		case i%5 == 0:
			c.MotivoRechazo = "tienda cerrada"
		default:
			continue
		}
		if _, err := e.Confirm("acme", d.DecisionID, c); err != nil {
			tb.Fatalf("confirmation %d: %v", i, err)
		}
	}
}

// damageDecision cuts short the stored record of the i-th decision of ref's
// index (0 the first) and returns its key.
func damageDecision(tb testing.TB, p *Service, db *store.DB, ref string, i int) []byte {
	tb.Helper()
	lo, hi := store.CustomerDecisionSpan("acme", ref)
	nonces, _, err := p.indexChunk(p.db, "acme", decisionIndex, lo, hi, i+1)
	if err != nil || len(nonces) != i+1 {
		tb.Fatalf("decision index of %s: %d entries, %v", ref, len(nonces), err)
	}
	key := p.rec.DecisionKey("acme", nonces[i])
	v, err := db.Get(key)
	if err != nil {
		tb.Fatal(err)
	}
	b := db.NewBatch()
	defer b.Close()
	b.Set(key, v[:len(v)/2])
	if err := b.Commit(); err != nil {
		tb.Fatal(err)
	}
	return key
}

// streamExport returns the document ExportStream writes for ref.
func streamExport(tb testing.TB, p *Service, ref string) []byte {
	tb.Helper()
	write, err := p.ExportStream("acme", ref, "ci", "trace")
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestExportStreamsManyDecisions: a customer with thousands of decisions
// (a point of sale asks for one at every walk-in sale) is exported a chunk
// of decision index entries at a time, its decisions and then its
// confirmations (a second walk); the document is byte for byte Export's,
// every decision and confirmation in it once, and a damaged decision in
// the middle is moved to quarantine and counted once.
func TestExportStreamsManyDecisions(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	const hot = "MOSTRADOR0001"
	n := 20000
	if testing.Short() {
		n = 3000
	}
	ingestFor(t, e, hot, "h", 10)
	decideMany(t, e, db, hot, n)
	decideMany(t, e, db, "vecina01", 3)
	broken := damageDecision(t, p, db, hot, n/2)
	p.exportChunk = 7
	chunks := 0
	p.afterExportChunk = func() error { chunks++; return nil }
	got := streamExport(t, p, hot)
	// 10 events, then n decisions walked twice, 7 index entries a chunk.
	if diff := cmp.Diff(2+2*((n+6)/7), chunks); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	var x client.ExportacionCliente
	if err := json.Unmarshal(got, &x); err != nil {
		t.Fatalf("streamed export is not JSON: %v", err)
	}
	ids, confirmed := map[string]int{}, map[string]int{}
	for _, d := range x.Decisiones {
		ids[d.DecisionID]++
	}
	for _, c := range x.Confirmaciones {
		confirmed[c.DecisionID]++
	}
	wantConfirmed := 0
	for i := range n {
		if i != n/2 && (i%3 == 0 || i%5 == 0) {
			wantConfirmed++
		}
	}
	type counts struct{ Decisions, Distinct, Confirmations, DistinctConfirmed, EnCuarentena int }
	want := counts{n - 1, n - 1, wantConfirmed, wantConfirmed, 1}
	if diff := cmp.Diff(want, counts{len(x.Decisiones), len(ids), len(x.Confirmaciones), len(confirmed), x.EnCuarentena}); diff != "" {
		t.Errorf("exported (-want +got):\n%s", diff)
	}
	if _, err := db.Get(broken); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the damaged decision's key: %v, want it moved to quarantine", err)
	}
	if _, err := db.Get(store.DamagedKey("acme", broken)); err != nil {
		t.Errorf("the damaged decision in quarantine: %v", err)
	}
	whole, err := p.Export("acme", hot, "ci", "trace")
	if err != nil {
		t.Fatal(err)
	}
	b, err := jsonappend.Marshal(whole)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, got) {
		t.Errorf("streamed export differs from Export's document:\n%s", cmp.Diff(string(b), string(got)))
	}
}

// TestExportStreamErrorMidStream: a read that fails during the walk of the
// events, of the decisions or of the confirmations is write's error, and
// what was written is the start of the document, cut short (the server cuts
// the answer there); a failure before any byte (an unknown tenant) is
// ExportStream's own error.
func TestExportStreamErrorMidStream(t *testing.T) {
	const hot = "MOSTRADOR0001"
	for _, tc := range []struct {
		name string
		// failAt is the chunk whose end fails (250 events and 450
		// decisions, 100 a chunk): 1-3 the events', 4-8 the decisions',
		// 9-13 the confirmations'.
		failAt int
	}{
		{"events", 2},
		{"decisions", 5},
		{"confirmations", 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, p, db, _ := newTest(t, 2)
			ingestFor(t, e, hot, "h", 250)
			decideMany(t, e, db, hot, 450)
			p.exportChunk = 100
			boom, chunks := errors.New("store: read failed"), 0
			p.afterExportChunk = func() error {
				if chunks++; chunks == tc.failAt {
					return boom
				}
				return nil
			}
			write, err := p.ExportStream("acme", hot, "ci", "trace")
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := write(&buf); !errors.Is(err, boom) {
				t.Errorf("write: %v, want %v", err, boom)
			}
			p.afterExportChunk = nil
			whole, err := p.Export("acme", hot, "ci", "trace")
			if err != nil {
				t.Fatal(err)
			}
			doc, err := jsonappend.Marshal(whole)
			if err != nil {
				t.Fatal(err)
			}
			if got := buf.Bytes(); len(got) == 0 || len(got) >= len(doc) || !bytes.HasPrefix(doc, got) {
				t.Errorf("a failed export wrote %d bytes of the %d of the document (its start: %v); want its start, cut short",
					len(got), len(doc), bytes.HasPrefix(doc, got))
			}
			if w, err := p.ExportStream("nadie", hot, "ci", "trace"); err == nil || w != nil {
				t.Errorf("export of an unknown tenant: %v, want an error before writing", err)
			}
		})
	}
}

// exportHeap returns the most heap in use (after a collection) above what
// was in use before the export, at every chunk and every write of
// ExportStream's document of ref (written nowhere).
func exportHeap(tb testing.TB, p *Service, ref string) uint64 {
	tb.Helper()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, uint64(0)
	sample := func() {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > base {
			peak = max(peak, ms.HeapAlloc-base)
		}
	}
	p.afterExportChunk = func() error { sample(); return nil }
	defer func() { p.afterExportChunk = nil }()
	write, err := p.ExportStream("acme", ref, "ci", "trace")
	if err != nil {
		tb.Fatal(err)
	}
	if err := write(sampler(sample)); err != nil {
		tb.Fatal(err)
	}
	return peak
}

// sampler is a writer that discards what it is given after calling itself.
type sampler func()

func (s sampler) Write(b []byte) (int, error) {
	s()
	return len(b), nil
}

// TestExportStreamDecisionsHeapFlat: ten times the decisions, about the
// same heap: ExportStream holds a chunk of them, not all (20,000 held
// took 40 MB more than 2,000).
func TestExportStreamDecisionsHeapFlat(t *testing.T) {
	small, large := 2000, 20000
	if testing.Short() {
		small, large = 500, 5000
	}
	peaks := map[int]uint64{}
	for _, n := range []int{small, large} {
		e, p, db, _ := newTest(t, 2)
		decideMany(t, e, db, "MOSTRADOR0001", n)
		p.exportChunk = 200
		peaks[n] = exportHeap(t, p, "MOSTRADOR0001")
	}
	t.Logf("heap peak above the store: %d decisions %.1f MB, %d decisions %.1f MB", small, float64(peaks[small])/(1<<20), large, float64(peaks[large])/(1<<20))
	if grew := int64(peaks[large]) - int64(peaks[small]); grew > 2<<20 {
		t.Errorf("the export of %d decisions took %.1f MB more heap than that of %d; want at most 2 MB more",
			large, float64(grew)/(1<<20), small)
	}
}

// TestExportIsOneMoment: what is written about the customer while the
// export walks (an event, a decision and a confirmation after every chunk)
// is not in the document: it is the customer's data as of the walk's
// start, the same as an export taken just before, and its confirmations
// agree with its decisions.
func TestExportIsOneMoment(t *testing.T) {
	e, p, db, _ := newTest(t, 2)
	const hot = "MOSTRADOR0001"
	ingestFor(t, e, hot, "h", 5)
	decideMany(t, e, db, hot, 8)
	before, err := p.Export("acme", hot, "ci", "trace")
	if err != nil {
		t.Fatal(err)
	}
	var pending []string
	for _, d := range before.Decisiones {
		if d.EstadoEjecucion == "pendiente" {
			pending = append(pending, d.DecisionID)
		}
	}
	if len(pending) < 3 {
		t.Fatalf("%d pending decisions to confirm during the export, want 3 or more", len(pending))
	}
	p.exportChunk = 2
	writes := 0
	p.afterExportChunk = func() error {
		writes++
		ingestFor(t, e, hot, fmt.Sprintf("late%d", writes), 1)
		if _, err := e.Decide("acme", engine.Request{ClienteRef: hot, Canal: "push", CapExempt: true}); err != nil {
			return err
		}
		if len(pending) > 0 {
			if _, err := e.Confirm("acme", pending[0], engine.Confirmation{Ejecutada: true}); err != nil {
				return err
			}
			pending = pending[1:]
		}
		return nil
	}
	defer func() { p.afterExportChunk = nil }()
	var got client.ExportacionCliente
	if err := json.Unmarshal(streamExport(t, p, hot), &got); err != nil {
		t.Fatal(err)
	}
	if writes < 3 {
		t.Fatalf("%d chunks written between, want 3 or more", writes)
	}
	type moment struct {
		Events, Decisions, Confirmations []string
	}
	of := func(x *client.ExportacionCliente) moment {
		var m moment
		for _, ev := range x.Eventos {
			m.Events = append(m.Events, ev.EventID)
		}
		confirmed := map[string]bool{}
		for _, c := range x.Confirmaciones {
			m.Confirmations = append(m.Confirmations, c.DecisionID+" "+c.EstadoEjecucion)
			confirmed[c.DecisionID] = true
		}
		for _, d := range x.Decisiones {
			m.Decisions = append(m.Decisions, d.DecisionID+" "+d.EstadoEjecucion)
			if (d.EstadoEjecucion != "pendiente") != confirmed[d.DecisionID] {
				t.Errorf("decision %s is %s, confirmed in the document: %v", d.DecisionID, d.EstadoEjecucion, confirmed[d.DecisionID])
			}
		}
		return m
	}
	if diff := cmp.Diff(of(before), of(&got)); diff != "" {
		t.Errorf("the export walked while the customer's data changed (-as before it +streamed):\n%s", diff)
	}
}
