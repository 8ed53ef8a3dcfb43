package client

import (
	"context"
	"net/http"
	"net/url"
)

// Confirm confirms the execution of a decision
// (POST /v1/decisiones/{decision_id}/ejecucion): Ejecutada true if the
// decided action was applied (with AccionReal if another one was), false
// with MotivoRechazo if nothing was. Every engine decision needs one,
// accion 0 included; fallback decisions (EnRespaldo) need none.
//
// It is retried on 429, 5xx and lost connections. A retry that finds the
// first attempt arrived gets 409 ejecucion_ya_confirmada: the confirmation
// is stored.
func (c *Client) Confirm(ctx context.Context, decisionID string, p PeticionEjecucion) (*RespuestaEjecucion, error) {
	var out RespuestaEjecucion
	err := c.call(ctx, http.MethodPost, "/v1/decisiones/"+url.PathEscape(decisionID)+"/ejecucion", &p, &out, retrySafe)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// PutCampaign defines or replaces a campaign (PUT /v1/campanas/{campana_id}).
func (c *Client) PutCampaign(ctx context.Context, campanaID string, p Campana) (*CampanaRespuesta, error) {
	var out CampanaRespuesta
	if err := c.call(ctx, http.MethodPut, "/v1/campanas/"+url.PathEscape(campanaID), &p, &out, retrySafe); err != nil {
		return nil, err
	}
	return &out, nil
}

// Campaign returns a campaign (GET /v1/campanas/{campana_id}).
func (c *Client) Campaign(ctx context.Context, campanaID string) (*CampanaRespuesta, error) {
	var out CampanaRespuesta
	if err := c.call(ctx, http.MethodGet, "/v1/campanas/"+url.PathEscape(campanaID), nil, &out, retrySafe); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutCatalog replaces the action catalog as a whole
// (PUT /v1/catalogo-acciones).
func (c *Client) PutCatalog(ctx context.Context, p Catalogo) (*CatalogoRespuesta, error) {
	var out CatalogoRespuesta
	if err := c.call(ctx, http.MethodPut, "/v1/catalogo-acciones", &p, &out, retrySafe); err != nil {
		return nil, err
	}
	return &out, nil
}

// Catalog returns the action catalog (GET /v1/catalogo-acciones).
func (c *Client) Catalog(ctx context.Context) (*CatalogoRespuesta, error) {
	var out CatalogoRespuesta
	if err := c.call(ctx, http.MethodGet, "/v1/catalogo-acciones", nil, &out, retrySafe); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExportCustomer returns everything the engine holds about a customer
// (GET /v1/clientes/{cliente_ref}/exportacion). Each call is written to the
// server's access log.
func (c *Client) ExportCustomer(ctx context.Context, clienteRef string) (*ExportacionCliente, error) {
	var out ExportacionCliente
	if err := c.call(ctx, http.MethodGet, "/v1/clientes/"+url.PathEscape(clienteRef)+"/exportacion", nil, &out, retrySafe); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteCustomer schedules the deletion of everything held about a customer
// (DELETE /v1/clientes/{cliente_ref}); the answer's Estado is "programado".
func (c *Client) DeleteCustomer(ctx context.Context, clienteRef string) (*RegistroBorrado, error) {
	var out RegistroBorrado
	if err := c.call(ctx, http.MethodDelete, "/v1/clientes/"+url.PathEscape(clienteRef), nil, &out, retrySafe); err != nil {
		return nil, err
	}
	return &out, nil
}

// RegisterWebhook registers the tenant's webhook (PUT /v1/webhooks),
// replacing any earlier one. Keep the answer's Secreto for VerifyWebhook: it
// is shown once.
func (c *Client) RegisterWebhook(ctx context.Context, p PeticionWebhook) (*RegistroWebhook, error) {
	var out RegistroWebhook
	// Safe to retry: each registration replaces the last one, and the
	// secret returned is that of the registration in force.
	if err := c.call(ctx, http.MethodPut, "/v1/webhooks", &p, &out, retrySafe); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteWebhook removes the tenant's webhook (DELETE /v1/webhooks).
func (c *Client) DeleteWebhook(ctx context.Context) error {
	return c.call(ctx, http.MethodDelete, "/v1/webhooks", nil, &objetoVacio{}, retrySafe)
}
