package engine

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
)

// TestDecodeRefusesDaysGoingBack: the per-day columns store each day as a
// gap from the one before. A gap of 2⁶⁴−1 (−1 read as a signed number)
// would put a day before the one it follows; the decoder refuses it, as
// it refuses a ticket gap past featMaxDay, so a decoded record keeps its
// days in order.
func TestDecodeRefusesDaysGoingBack(t *testing.T) {
	// Two days, three tickets: only the day rows start "2, first day".
	ft := applyAll(t, buy(daysAgo(2), "T1", "a", 1000, 100), buy(daysAgo(2), "T3", "a", 500, 50), buy(daysAgo(1), "T2", "a", 1000, 100))
	if len(ft.days) != 2 {
		t.Fatalf("%d day rows, want 2", len(ft.days))
	}
	b := ft.AppendEncode(nil)
	// n = 2, the first day, then the gap column: width 1, gap 1.
	pat := append(binary.AppendUvarint(nil, 2), binary.AppendVarint(nil, int64(ft.days[0].day))...)
	pat = append(pat, 1, 1)
	i := bytes.Index(b, pat)
	if i < 0 || bytes.Contains(b[i+1:], pat) {
		t.Fatal("the day rows' gap column is not found once in the encoding")
	}
	j := i + len(pat) - 2
	bad := append(slices.Clone(b[:j]), 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	bad = append(bad, b[j+2:]...)
	if got, ok := DecodeFeatures(bad); ok {
		t.Errorf("decoded a record whose days go back: %v", got.days)
	}
}
