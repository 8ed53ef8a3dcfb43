package engine

import (
	"testing"

	"github.com/coupond/coupond/store"
)

// TestCheckCoversEveryKind: admin check decodes every kind of record with
// its readers' decoder, but for the kinds named in uncheckedKinds with the
// reason their readers need no check. A kind added to store and to neither
// (a new table the check would pass over in silence) fails here, as does
// a kind named unchecked that the check does decode.
func TestCheckCoversEveryKind(t *testing.T) {
	garbage := []byte{0xff, '{', 0x00}
	for _, k := range store.Kinds() {
		err := checkKind(k, garbage)
		_, unchecked := uncheckedKinds[k]
		switch {
		case err == nil && !unchecked:
			t.Errorf("kind %d: a damaged value passes the check, and uncheckedKinds does not say why", k)
		case err != nil && unchecked:
			t.Errorf("kind %d: named in uncheckedKinds, but the check decodes it (%v)", k, err)
		}
	}
	if len(store.Kinds()) < 25 {
		t.Errorf("store.Kinds lists %d kinds: want every table's", len(store.Kinds()))
	}
}
