package server

import "github.com/coupond/coupond/engine"

// countError counts an error answer of a tenant's request by codigo (422
// as "422") in the engine's hourly counters, for the operator console.
// Answers before authentication (no tenant) are not counted.
func (s *Server) countError(c *call, codigo string) {
	if c == nil || c.tenant == nil || s.Engine == nil {
		return
	}
	s.Engine.Counters().Add(c.tenant.ID, c.now(), engine.CountErrorPfx+codigo, 1)
}
