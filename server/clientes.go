package server

import (
	"io"
	"net/http"
	"net/url"

	"github.com/coupond/coupond/server/schema"
)

// Customer data rights: deletion (right to be forgotten) and export (right
// of access). Package privacy does the work; these handlers
// validate the path parameter and shape the answers.

// clienteParam validates the cliente_ref path parameter like the body field.
func clienteParam(c *call) (string, error) {
	return pathParam(c, "cliente_ref", schema.ClienteRef())
}

// handleDeleteCliente schedules the customer's deletion: 202 with the
// deletion record {"cliente_ref", "estado": "programado"}. The record and
// the durable job are committed (synced) before the answer. Location names
// the customer's export, whose "borrado" member follows the deletion from
// programado to completado (there is no separate status resource).
func (s *Server) handleDeleteCliente(c *call) error {
	ref, err := clienteParam(c)
	if err != nil {
		return err
	}
	rec, err := s.Privacy.RequestDeletion(c.tenant.ID, ref, c.clientID)
	if err != nil {
		return err
	}
	c.w.Header().Set("Location", "/v1/clientes/"+url.PathEscape(ref)+"/exportacion")
	c.answer = answer{http.StatusAccepted, map[string]string{"cliente_ref": ref, "estado": rec.Estado}}
	return nil
}

// handleExportCliente answers everything held about the customer; the
// access is in the access log (synced) before the answer is sent. The
// document is streamed (a walk-in sales account holds millions of events):
// every check is made before the status line, and an error after it cuts
// the answer short rather than ending a document that looks whole.
func (s *Server) handleExportCliente(c *call) error {
	ref, err := clienteParam(c)
	if err != nil {
		return err
	}
	write, err := s.Privacy.ExportStream(c.tenant.ID, ref, c.clientID, c.trace)
	if err != nil {
		return err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return s.streamJSON(c, write)
}

// streamJSON answers 200 with the JSON document write writes, and a
// newline. An error of write after the status line is logged and cuts the
// answer short (a client sees a broken response, never a complete-looking
// document); a client that went away is no error.
func (s *Server) streamJSON(c *call, write func(io.Writer) error) error {
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(http.StatusOK)
	dst := &writeErr{w: c.w}
	if err := write(dst); err != nil {
		if dst.err != nil {
			return ignoreClientGone(err) // the client went away
		}
		s.log.Error().Err(err).Str("trace_id", c.trace).Str("route", c.route).Msg("internal error after the answer started: answer cut short")
		panic(http.ErrAbortHandler)
	}
	_, err := c.w.Write([]byte{'\n'})
	return ignoreClientGone(err)
}

// writeErr remembers the error of its writer, to tell a client that went
// away from a failure of the source.
type writeErr struct {
	w   io.Writer
	err error
}

func (w *writeErr) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}
