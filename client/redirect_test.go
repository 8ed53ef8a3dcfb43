package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/client"
)

// redirectTarget is a server that answers tokens and anything else with
// 200, counting the requests it sees.
func redirectTarget(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var seen atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/token" {
			fmt.Fprint(w, tokenJSON)
			return
		}
		fmt.Fprint(w, `{"decision_id":"d-1","acciones":[],"version":1,"actualizado_en":"2030-01-01T00:00:00Z"}`)
	}))
	t.Cleanup(other.Close)
	return other, &seen
}

// redirectResult is what a call that met a redirect saw.
type redirectResult struct {
	Status    int   // of the *Error returned
	Elsewhere int64 // requests the redirect target saw
}

func redirected(err error, seen *atomic.Int64, before int64) redirectResult {
	got := redirectResult{Elsewhere: seen.Load() - before}
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		got.Status = apiErr.Status
	}
	return got
}

// TestNoRedirects: the Client follows no redirect, through its own
// http.Client or the caller's (which it leaves unchanged): a 3xx is an
// *Error with that status, and the server redirected to never sees a
// request, so no bearer token reaches it. net/http followed them, and
// kept the Authorization header for another port of the same host.
func TestNoRedirects(t *testing.T) {
	other, seen := redirectTarget(t)
	redirect := map[string]int{
		"/v1/decisiones":                        http.StatusTemporaryRedirect,
		"/v1/catalogo-acciones":                 http.StatusFound,
		"/v1/decisiones/d-1/ejecucion":          http.StatusPermanentRedirect,
		"/v1/clientes/cli-00000001/exportacion": http.StatusMovedPermanently,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, ok := redirect[r.URL.Path]; ok {
			http.Redirect(w, r, other.URL+r.URL.Path, code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, tokenJSON)
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	calls := []struct {
		name   string
		status int
		call   func(*client.Client) error
	}{
		{"Decide", 307, func(c *client.Client) error { _, err := c.Decide(ctx, decisionRequest("cli-00000001")); return err }},
		{"Catalog", 302, func(c *client.Client) error { _, err := c.Catalog(ctx); return err }},
		{"Confirm", 308, func(c *client.Client) error {
			_, err := c.Confirm(ctx, "d-1", client.PeticionEjecucion{Ejecutada: true})
			return err
		}},
		{"ExportCustomer", 301, func(c *client.Client) error { _, err := c.ExportCustomer(ctx, "cli-00000001"); return err }},
	}
	mine := &http.Client{Transport: &http.Transport{}}
	for _, hc := range []*http.Client{nil, mine} {
		opts := []client.Option{client.WithBudget(2 * time.Second), client.WithTimeout(2 * time.Second)}
		if hc != nil {
			opts = append(opts, client.WithHTTPClient(hc))
		}
		c, err := client.New(srv.URL, "ci_x", "sec", opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		for _, tt := range calls {
			t.Run(fmt.Sprintf("%s/own client %v", tt.name, hc != nil), func(t *testing.T) {
				before := seen.Load()
				err := tt.call(c)
				if diff := cmp.Diff(redirectResult{Status: tt.status}, redirected(err, seen, before)); diff != "" {
					t.Errorf("got %v (-want +got):\n%s", err, diff)
				}
			})
		}
	}
	if mine.CheckRedirect != nil {
		t.Error("the caller's http.Client was changed")
	}
}

// TestNoRedirectOfTokenFetch: a token endpoint that redirects gets a 307
// *Error back, and the client secret never reaches the redirect target.
func TestNoRedirectOfTokenFetch(t *testing.T) {
	other, seen := redirectTarget(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	for _, hc := range []*http.Client{nil, {}} {
		t.Run(fmt.Sprintf("own client %v", hc != nil), func(t *testing.T) {
			opts := []client.Option{client.WithTimeout(2 * time.Second)}
			if hc != nil {
				opts = append(opts, client.WithHTTPClient(hc))
			}
			c, err := client.New(srv.URL, "ci_x", "sec", opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			before := seen.Load()
			err = c.Warm(context.Background())
			if diff := cmp.Diff(redirectResult{Status: 307}, redirected(err, seen, before)); diff != "" {
				t.Errorf("got %v (-want +got):\n%s", err, diff)
			}
		})
	}
}
