package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// Confirm confirms the execution of a decision
// (POST /v1/decisiones/{decision_id}/ejecucion): Ejecutada true if the
// decided action was applied (with AccionReal if another one was), false
// with MotivoRechazo if nothing was. Every engine decision needs one,
// accion 0 included; fallback decisions (EnRespaldo) need none.
//
// A decision is confirmed once. Decide, or a batch job's line
// (BatchResults), for a customer whose last decision's reward window is
// still open returns that open decision (same DecisionID, Accion 0,
// Propension 1): nothing new was decided, and confirming it again is 409
// ejecucion_ya_confirmada.
//
// It is retried on 429, 5xx and lost connections, every attempt of one
// call with the same Idempotency-Key (coupond accepts it on this route
// beyond the API's spec): a retry whose first attempt landed gets the
// stored answer, so 409 ejecucion_ya_confirmada means another call
// confirmed the decision. An empty decisionID (a fallback decision has
// none) is an error, sent nowhere.
func (c *Client) Confirm(ctx context.Context, decisionID string, p PeticionEjecucion) (*RespuestaEjecucion, error) {
	id, err := pathSegment("decision_id", decisionID)
	if err != nil {
		return nil, fmt.Errorf("%w (a fallback decision, EnRespaldo, has none and needs no confirmation)", err)
	}
	var out RespuestaEjecucion
	key := []string{newIdempotencyKey()}
	if err := c.callKeyed(ctx, http.MethodPost, "/v1/decisiones/"+id+"/ejecucion", &p, &out, retrySafe, key); err != nil {
		return nil, err
	}
	return &out, nil
}

// RecordFallback records a decision the caller took by its own rule
// because the engine did not answer or was paused
// (POST /v1/decisiones/respaldo; stored with propensity 1, no
// confirmation needed). Decide records its own fallback decisions; call
// this when the caller applied its rule without one, such as after Decide
// returned ErrNoFallback (then pass Replacing(err)) or a batch job failed.
// Every attempt of one call carries the same Idempotency-Key, so it is
// retried as Decide is (429, 5xx, lost connections) and stores one record;
// a second call records a second decision.
func (c *Client) RecordFallback(ctx context.Context, p PeticionRespaldo, opts ...RecordOption) error {
	var o recordOptions
	for _, opt := range opts {
		opt(&o)
	}
	return c.callWith(ctx, http.MethodPost, "/v1/decisiones/respaldo", &p, &objetoVacio{}, retrySafe,
		[]string{newIdempotencyKey()}, replacesHeader(o.replaces))
}

// PutCampaign defines or replaces a campaign (PUT /v1/campanas/{campana_id}).
func (c *Client) PutCampaign(ctx context.Context, campanaID string, p Campana) (*CampanaRespuesta, error) {
	id, err := pathSegment("campana_id", campanaID)
	if err != nil {
		return nil, err
	}
	return callFor[CampanaRespuesta](ctx, c, http.MethodPut, "/v1/campanas/"+id, &p, retrySafe)
}

// Campaign returns a campaign (GET /v1/campanas/{campana_id}).
func (c *Client) Campaign(ctx context.Context, campanaID string) (*CampanaRespuesta, error) {
	id, err := pathSegment("campana_id", campanaID)
	if err != nil {
		return nil, err
	}
	return callFor[CampanaRespuesta](ctx, c, http.MethodGet, "/v1/campanas/"+id, nil, retrySafe)
}

// PutCatalog replaces the action catalog as a whole
// (PUT /v1/catalogo-acciones).
func (c *Client) PutCatalog(ctx context.Context, p Catalogo) (*CatalogoRespuesta, error) {
	return callFor[CatalogoRespuesta](ctx, c, http.MethodPut, "/v1/catalogo-acciones", &p, retrySafe)
}

// Catalog returns the action catalog (GET /v1/catalogo-acciones).
func (c *Client) Catalog(ctx context.Context) (*CatalogoRespuesta, error) {
	return callFor[CatalogoRespuesta](ctx, c, http.MethodGet, "/v1/catalogo-acciones", nil, retrySafe)
}

// ExportCustomer returns everything the engine holds about a customer
// (GET /v1/clientes/{cliente_ref}/exportacion). Each call is written to the
// server's access log. The document has no bound on its length (a walk-in
// sales account may hold millions of events) and is read whole into
// memory; the Client's timeout (WithTimeout) bounds the call when ctx has
// no deadline, so give a long history's ctx one. A document cut short is
// an error.
func (c *Client) ExportCustomer(ctx context.Context, clienteRef string) (*ExportacionCliente, error) {
	ref, err := pathSegment("cliente_ref", clienteRef)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var out *ExportacionCliente
	err = c.retry(ctx, 20, retrySafe, func() error {
		resp, err := c.send(ctx, http.MethodGet, c.base+"/v1/clientes/"+ref+"/exportacion", nil, nil, nil)
		if err != nil {
			return err
		}
		out = new(ExportacionCliente)
		return c.decodeUnbounded(resp, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteCustomer schedules the deletion of everything held about a customer
// (DELETE /v1/clientes/{cliente_ref}); the answer's Estado is "programado".
func (c *Client) DeleteCustomer(ctx context.Context, clienteRef string) (*RegistroBorrado, error) {
	ref, err := pathSegment("cliente_ref", clienteRef)
	if err != nil {
		return nil, err
	}
	return callFor[RegistroBorrado](ctx, c, http.MethodDelete, "/v1/clientes/"+ref, nil, retrySafe)
}

// RegisterWebhook registers the tenant's webhook (PUT /v1/webhooks),
// replacing any earlier one. Keep the answer's Secreto for VerifyWebhook: it
// is shown once.
func (c *Client) RegisterWebhook(ctx context.Context, p PeticionWebhook) (*RegistroWebhook, error) {
	// Safe to retry: each registration replaces the last one, and the
	// secret returned is that of the registration in force.
	return callFor[RegistroWebhook](ctx, c, http.MethodPut, "/v1/webhooks", &p, retrySafe)
}

// DeleteWebhook removes the tenant's webhook (DELETE /v1/webhooks).
func (c *Client) DeleteWebhook(ctx context.Context) error {
	return c.call(ctx, http.MethodDelete, "/v1/webhooks", nil, &objetoVacio{}, retrySafe)
}

// pathSegment returns v escaped as one path segment, or an error naming
// param when v is empty: the server would answer a bare 404 no_encontrado,
// which reads as a record that does not exist.
func pathSegment(param, v string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("coupond: %s is empty", param)
	}
	return url.PathEscape(v), nil
}
