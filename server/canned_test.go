package server

import (
	"strings"
	"testing"
)

// TestJSONCannedMatchesOnlyNetHTTP: only net/http's own error answers are
// rewritten; a handler's answer, whatever its status or body, passes as is.
func TestJSONCannedMatchesOnlyNetHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, b string
		want    bool
	}{
		{"net/http 400", "HTTP/1.1 400 Bad Request" + cannedHead + "400 Bad Request", true},
		{"net/http 400 with a reason", "HTTP/1.1 400 Bad Request: missing required Host header" + cannedHead + "400 Bad Request: missing required Host header", true},
		{"net/http 431", "HTTP/1.1 431 Request Header Fields Too Large" + cannedHead + "431 Request Header Fields Too Large", true},
		{"handler 400", "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 3\r\nContent-Type: application/json\r\n\r\n{}\n", false},
		{"handler text body that quotes the head", "HTTP/1.1 200 OK\r\nContent-Length: 80\r\n\r\n" + cannedHead, false},
		{"a body write", `{"codigo":"x"}` + cannedHead, false},
		{"2xx", "HTTP/1.1 200 OK" + cannedHead + "ok", false},
		{"net/http 417", "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: Fri, 04 Dec 2026 14:42:41 GMT\r\nContent-Length: 0\r\n\r\n", true},
		{"net/http 417, HTTP/1.0", "HTTP/1.0 417 Expectation Failed\r\nConnection: close\r\nDate: Fri, 04 Dec 2026 14:42:41 GMT\r\nContent-Length: 0\r\n\r\n", true},
		{"417 with a body", "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 2\r\n\r\n{}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, ok := jsonCanned([]byte(tc.b))
			if ok != tc.want {
				t.Fatalf("jsonCanned matched %v, want %v", ok, tc.want)
			}
			if ok && !strings.Contains(string(got), `"codigo":"esquema_invalido"`) {
				t.Errorf("rewritten answer lacks the error body:\n%s", got)
			}
		})
	}
}
