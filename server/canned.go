package server

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"

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
}

// jsonCanned returns b, net/http's own answer to a request it could not
// read (a malformed request line or header: 400; a header block over
// MaxHeaderBytes: 431; an unknown Transfer-Encoding: 501), as the API's
// error body (codigo esquema_invalido, a trace id in the body and in
// X-Trace-Id), so that every error a client gets is JSON; false for any
// other write. net/http's reason, a fixed English phrase ("missing
// required Host header"), is kept in mensaje.
func jsonCanned(b []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(b, []byte("HTTP/1.1 "))
	if !ok {
		return nil, false
	}
	status, _, ok := bytes.Cut(rest, []byte(cannedHead))
	if !ok || len(status) < 3 || bytes.ContainsAny(status, "\r\n") {
		return nil, false
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	msg, ok := cannedMessages[code]
	if !ok {
		msg = "petición HTTP rechazada"
	}
	if _, reason, ok := bytes.Cut(status, []byte(": ")); ok {
		msg += " (" + string(reason) + ")"
	}
	trace := newTraceID()
	body, err := encodeJSON(client.ErrorV1{Codigo: "esquema_invalido", Mensaje: truncateRunes(msg, 512), TraceID: trace})
	if err != nil {
		return nil, false
	}
	body = append(body, '\n')
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Length: %d\r\nContent-Type: application/json\r\nX-Trace-Id: %s\r\n\r\n",
		code, http.StatusText(code), len(body), trace)
	return append([]byte(head), body...), true
}
