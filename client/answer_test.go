package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/coupond/coupond/client"
)

// TestAnswerNotJSONThroughInMemoryTransport: a 200 whose body is not JSON
// (a proxy's page, a stub in an integrator's test) is an error, or
// Decide's fallback, also through a RoundTripper whose responses carry no
// Request, as httptest.ResponseRecorder's do: never a panic in the
// caller's process.
func TestAnswerNotJSONThroughInMemoryTransport(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/token" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"access_token":"tok","expires_in":900,"scope":"x","token_type":"Bearer"}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>portal</html>")
	})
	c, err := client.New("http://coupond.invalid", "ci_x", "sec", client.WithFallback(0), client.WithBreaker(0, time.Second),
		client.WithHTTPClient(&http.Client{Transport: handlerTransport{h}}), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		c.Close(ctx) // the fallback record is never accepted here
	}()
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
	}{
		{"Catalog", func() error { _, err := c.Catalog(ctx); return err }},
		{"Confirm", func() error {
			_, err := c.Confirm(ctx, "d-1", client.PeticionEjecucion{Ejecutada: true})
			return err
		}},
		{"Decide", func() error {
			d, err := c.Decide(ctx, decisionRequest("cli-00000001"))
			if err != nil {
				return err
			}
			if !d.EnRespaldo {
				return nil
			}
			return d.Causa
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				err = tt.call()
			}()
			var apiErr *client.Error
			if err == nil || errors.As(err, &apiErr) {
				t.Fatalf("got %v, want an error saying the answer is not JSON", err)
			}
			t.Log(err)
		})
	}
}
