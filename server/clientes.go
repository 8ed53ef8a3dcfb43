package server

import (
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
// access is in the access log (synced) before the answer is sent.
func (s *Server) handleExportCliente(c *call) error {
	ref, err := clienteParam(c)
	if err != nil {
		return err
	}
	x, err := s.Privacy.Export(c.tenant.ID, ref, c.clientID, c.trace)
	if err != nil {
		return err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	c.answer = answer{http.StatusOK, x}
	return nil
}
