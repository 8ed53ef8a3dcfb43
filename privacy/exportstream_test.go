package privacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/jsonappend"
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
	// 5,001 index entries (the broken coupon event's included), 7 a chunk.
	if diff := cmp.Diff((n+1+6)/7, chunks); diff != "" {
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

// TestExportStreamErrorMidStream: a read that fails once the document is
// under way is write's error, and what was written is not a JSON document
// (the server cuts the answer there); a failure before any byte (an
// unknown tenant) is ExportStream's own error.
func TestExportStreamErrorMidStream(t *testing.T) {
	e, p, _, _ := newTest(t, 2)
	const hot = "MOSTRADOR0001"
	ingestFor(t, e, hot, "h", 500)
	p.exportChunk = 100
	boom, chunks := errors.New("store: read failed"), 0
	p.afterExportChunk = func() error {
		if chunks++; chunks == 3 {
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
	if buf.Len() == 0 || json.Valid(buf.Bytes()) {
		t.Errorf("a failed export: %d bytes written, valid JSON %v; want part of a document", buf.Len(), json.Valid(buf.Bytes()))
	}
	if w, err := p.ExportStream("nadie", hot, "ci", "trace"); err == nil || w != nil {
		t.Errorf("export of an unknown tenant: %v, want an error before writing", err)
	}
}
