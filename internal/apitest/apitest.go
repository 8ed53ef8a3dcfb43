// Package apitest sends the tests' requests to the v1 API the way an
// integrator does: a body given as a string, bytes or any value (encoded
// as JSON), the JSON content type when there is a body, the bearer token
// when there is one, and extra headers as name, value pairs; and it reads
// an answer's JSON object. The server's tests (over httptest) and the
// end-to-end tests of cli (over the built binary) share it. Tests only:
// nothing in the product imports it.
package apitest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// SetHeaders sets on r what every API call of the tests carries: the JSON
// content type if hasBody, the bearer token if token is not empty, and hdr
// as name, value pairs.
func SetHeaders(r *http.Request, hasBody bool, token string, hdr ...string) {
	if hasBody {
		r.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
}

// Do sends method url with body (nil: none; a string or []byte as it is;
// anything else as JSON), the token and hdr (see SetHeaders), and returns
// the answer; a request that cannot be built or sent, or whose answer
// does not come within doTimeout, fails tb (a server that hangs fails the
// test instead of holding it until go test's own timeout).
func Do(tb testing.TB, method, url, token string, body any, hdr ...string) *http.Response {
	tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			tb.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		tb.Fatal(err)
	}
	SetHeaders(req, body != nil, token, hdr...)
	resp, err := (&http.Client{Timeout: doTimeout}).Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// doTimeout bounds one request of Do, its body's reading included.
const doTimeout = time.Minute

// Object reads and closes resp's body and returns it decoded when it is a
// JSON object (nil otherwise); a body that starts as an object but is not
// valid JSON fails tb.
func Object(tb testing.TB, resp *http.Response) map[string]any {
	tb.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(data) > 0 && data[0] == '{' {
		if err := json.Unmarshal(data, &m); err != nil {
			tb.Fatalf("%s %s: bad JSON body: %v\n%s", resp.Request.Method, resp.Request.URL.Path, err, data)
		}
	}
	return m
}
