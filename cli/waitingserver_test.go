package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWaitingServerMetrics: while serve waits at start for the disk to
// come back above the reserve, /metrics answers the disk series (writes
// refused), so the disk alerts fire instead of only "coupond down";
// /healthz answers 200 and the API 503 as before.
func TestWaitingServerMetrics(t *testing.T) {
	avail := uint64(700 << 20)
	srv := httptest.NewServer(waitingHandler(func() uint64 { return avail }, 1<<30, func() bool { return false }))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	avail = 600 << 20 // read at each scrape
	st, text := get("/metrics")
	var got []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "coupond_") {
			got = append(got, l)
		}
	}
	want := []string{"coupond_disk_available_bytes 6.291456e+08", "coupond_disk_reserve_bytes 1.073741824e+09", "coupond_writes_refused 1"}
	if diff := cmp.Diff([]any{200, want}, []any{st, got}); diff != "" {
		t.Errorf("/metrics while waiting for space (-want +got):\n%s\n%s", diff, text)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503, "/v1/decisiones": 503} {
		if st, _ := get(path); st != want {
			t.Errorf("%s: %d, want %d", path, st, want)
		}
	}
}
