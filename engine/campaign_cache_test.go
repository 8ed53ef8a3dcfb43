package engine

import (
	"errors"
	"fmt"
	"testing"
)

// TestCampaignCacheBounded: made-up campaign ids do not grow a tenant's
// memory without bound, and a miss is still a miss past the bound.
func TestCampaignCacheBounded(t *testing.T) {
	e, _ := newTestEngine(t, 1, nil)
	for i := range maxCampaignCache + 5000 {
		if _, err := e.Campaigns.Campaign("acme", fmt.Sprintf("made-up-%d", i)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("made-up campaign %d: %v, want ErrNotFound", i, err)
		}
	}
	ts, _ := e.state("acme")
	if n := len(ts.campaigns); n > maxCampaignCache {
		t.Errorf("campaign cache holds %d entries, want at most %d", n, maxCampaignCache)
	}
}
