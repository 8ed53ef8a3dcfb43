package server

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coupond/coupond/client"
)

// cannedHead is what net/http writes after the status line of the answers
// it gives by itself, before any handler runs (its server.go's
// errorHeaders). A handler's answer never has it: net/http writes a
// handler's headers sorted, Connection before Content-Type.
const cannedHead = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// cannedMessages are the mensaje of net/http's own answers by status.
var cannedMessages = map[int]string{
	http.StatusBadRequest:                  "petición HTTP mal formada: línea de petición o cabeceras ilegibles",
	http.StatusRequestHeaderFieldsTooLarge: "las cabeceras de la petición exceden " + strconv.Itoa(MaxHeaderBytes>>10) + " KiB",
	http.StatusNotImplemented:              "Transfer-Encoding no admitido",
	http.StatusExpectationFailed:           "Expect no admitido: solo 100-continue",
}

// cannedAnswer is what the access log records of one of net/http's own
// answers: its status, net/http's reason (a fixed English phrase such as
// "missing required Host header", never the client's bytes; empty when
// it gave none) and the trace id the client got.
type cannedAnswer struct {
	status        int
	reason, trace string
}

// jsonCanned returns b, net/http's own answer to a request it could not
// read (a malformed request line or header: 400; a header block over
// MaxHeaderBytes: 431; an unknown Transfer-Encoding: 501) or would not
// hand to a handler (an Expect other than 100-continue: 417), as the API's
// error body (codigo esquema_invalido, a trace id in the body and in
// X-Trace-Id), so that every error a client gets is JSON, and what the
// access log records of it; false for any other write. net/http's
// reason is kept in mensaje.
func jsonCanned(b []byte) ([]byte, cannedAnswer, bool) {
	code, reason, ok := cannedStatus(b)
	if !ok {
		return nil, cannedAnswer{}, false
	}
	a := cannedAnswer{status: code, reason: reason, trace: NewTraceID()}
	msg, ok := cannedMessages[code]
	if !ok {
		msg = "petición HTTP rechazada"
	}
	if reason != "" {
		msg += " (" + reason + ")"
	}
	body, err := encodeJSON(client.ErrorV1{Codigo: "esquema_invalido", Mensaje: truncateRunes(msg, 512), TraceID: a.trace})
	if err != nil {
		return nil, cannedAnswer{}, false
	}
	body = append(body, '\n')
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Length: %d\r\nContent-Type: application/json\r\nX-Trace-Id: %s\r\n\r\n",
		code, http.StatusText(code), len(body), a.trace)
	return append([]byte(head), body...), a, true
}

// cannedStatus returns the status and reason of b when b is one of
// net/http's own answers (jsonCanned): a whole head in cannedHead's form
// with a 4xx or 5xx status, or expectationFailed's head.
func cannedStatus(b []byte) (code int, reason string, ok bool) {
	if expectationFailed(b) {
		return http.StatusExpectationFailed, "", true
	}
	rest, ok := bytes.CutPrefix(b, []byte("HTTP/1.1 "))
	if !ok {
		return 0, "", false
	}
	status, _, ok := bytes.Cut(rest, []byte(cannedHead))
	if !ok || len(status) < 3 || bytes.ContainsAny(status, "\r\n") {
		return 0, "", false
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || code < 400 || code > 599 {
		return 0, "", false
	}
	_, r, _ := bytes.Cut(status, []byte(": "))
	return code, string(r), true
}

// expectationFailed reports whether b is net/http's answer to a request
// whose Expect is not 100-continue (its response.sendExpectationFailed,
// written before any handler runs): a whole head with status 417 and an
// empty body, in the request's HTTP version. No handler answers 417.
func expectationFailed(b []byte) bool {
	return (bytes.HasPrefix(b, []byte("HTTP/1.1 417 ")) || bytes.HasPrefix(b, []byte("HTTP/1.0 417 "))) &&
		bytes.HasSuffix(b, []byte("\r\n\r\n")) && bytes.Contains(b, []byte("\r\nContent-Length: 0\r\n"))
}

// cannedRoute is the route label, in the access log and /metrics, of the
// requests net/http answered by itself (jsonCanned): no route was reached.
const cannedRoute = "unreadable"

// logCanned writes the access log line of one of net/http's own answers,
// a, to a request whose head began arriving at began, and counts it in
// /metrics as the pipeline does its requests (wrap). The line has the
// fields of the pipeline's that are known before a request is read (no
// tenant, no client_id: nothing of the request was read as a request)
// plus net/http's reason; never any of the client's bytes. It is at
// info whatever the status: every one of these answers is to a request
// the client got wrong (501 is an unknown Transfer-Encoding it sent),
// which no operator can act on, so it must not read as a server's warning.
func (s *Server) logCanned(a cannedAnswer, began time.Time) {
	d := max(s.Now().Sub(began), 0)
	s.metrics.observe(cannedRoute, a.status, d)
	ev := s.log.Info().Str("route", cannedRoute).Int("status", a.status).Dur("latency", d).Str("trace_id", a.trace)
	if a.reason != "" {
		ev = ev.Str("reason", a.reason)
	}
	ev.Msg("request")
}
