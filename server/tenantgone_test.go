package server

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// TestTenantGoneAnswers401: a request whose tenant was deleted after it
// passed authentication is answered 401 no_autenticado, as every later
// request of the tenant, whether the engine no longer knows the tenant
// (engine.ErrNoTenant) or the store refused its write because the
// deletion had erased the tenant (store.ErrTenantErased: the write was
// held past the sweep's grace). The latter was a 500 error_interno.
func TestTenantGoneAnswers401(t *testing.T) {
	h := newHarness(t)
	for _, err := range []error{
		fmt.Errorf("decide: %w: %q", engine.ErrNoTenant, "acme"),
		fmt.Errorf("decide: commit: %w", fmt.Errorf("store: commit: a write of tenant %q: %w", "acme", store.ErrTenantErased)),
	} {
		rec := httptest.NewRecorder()
		c := &call{r: httptest.NewRequest("POST", "/v1/decisiones", nil), route: "decide", trace: "t1"}
		h.srv.writeError(rec, c, err)
		got := fmt.Sprintf("%d %s", rec.Code, rec.Header().Get("WWW-Authenticate"))
		if diff := cmp.Diff("401 Bearer", got); diff != "" {
			t.Errorf("%v (-want +got):\n%s", err, diff)
		}
	}
}
