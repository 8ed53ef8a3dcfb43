package server

import "net/http"

// Body size limits.
const (
	smallBody  = 64 << 10 // ordinary JSON bodies
	eventsBody = 1 << 20  // POST /v1/eventos: at most 1 MB (spec)
	batchBody  = 96 << 20 // POST /v1/lotes-decision: 500,000 cliente_ref of up to 128 characters
)

// routes lists the whole API. The OpenAPI document (openapi.json) describes
// exactly these routes; TestOpenAPIMatchesRoutes keeps the two in step.
func (s *Server) routes() []route {
	return []route{
		{method: http.MethodGet, path: "/healthz", name: "healthz", public: true, h: s.handleHealth},
		{method: http.MethodGet, path: "/readyz", name: "readyz", public: true, h: s.handleReady},
		{method: http.MethodGet, path: "/metrics", name: "metrics", public: true, h: s.handleMetrics},
		{method: http.MethodGet, path: "/v1/openapi.json", name: "openapi", public: true, h: s.handleOpenAPI},
		{method: http.MethodPost, path: "/v1/token", name: "token", public: true, h: s.handleToken},

		{method: http.MethodPut, path: "/v1/catalogo-acciones", name: "catalogo_put", scope: scopeCatalogo, class: classOther, maxBody: smallBody * 4, h: s.handlePutCatalog},
		{method: http.MethodGet, path: "/v1/catalogo-acciones", name: "catalogo_get", scope: scopeCatalogo, class: classOther, h: s.handleGetCatalog},
		{method: http.MethodPut, path: "/v1/campanas/:campana_id", name: "campana_put", scope: scopeCampanas, class: classOther, maxBody: smallBody, h: s.handlePutCampaign},
		{method: http.MethodGet, path: "/v1/campanas/:campana_id", name: "campana_get", scope: scopeCampanas, class: classOther, h: s.handleGetCampaign},

		{method: http.MethodPost, path: "/v1/eventos", name: "eventos", scope: scopeEventos, class: classEventos, quota: quotaEvents, maxBody: eventsBody, h: s.handleEvents},

		{method: http.MethodPost, path: "/v1/decisiones", name: "decisiones", scope: scopeDecisiones, class: classDecisiones, quota: quotaDecisions, maxBody: smallBody, h: s.handleDecide},
		{method: http.MethodPost, path: "/v1/decisiones/:decision_id/ejecucion", name: "ejecucion", scope: scopeConfirmar, class: classEjecucion, maxBody: smallBody, h: s.handleConfirm},
		{method: http.MethodPost, path: "/v1/decisiones/respaldo", name: "respaldo", scope: scopeConfirmar, class: classOther, maxBody: smallBody, h: s.handleFallback},

		{method: http.MethodPost, path: "/v1/lotes-decision", name: "lotes_crear", scope: scopeDecisiones, class: classOther, quota: quotaBatch, maxBody: batchBody, h: s.handleBatchCreate},
		{method: http.MethodGet, path: "/v1/lotes-decision/:job_id", name: "lotes_estado", scope: scopeDecisiones, class: classOther, h: s.handleBatchStatus},
		{method: http.MethodGet, path: "/v1/lotes-decision/:job_id/resultado", name: "lotes_resultado", scope: scopeDecisiones, class: classOther, h: s.handleBatchResult},
		{method: http.MethodGet, path: "/v1/lotes-decision/:job_id/descarga", name: "lotes_descarga", public: true, h: s.handleSignedDownload},

		{method: http.MethodDelete, path: "/v1/clientes/:cliente_ref", name: "clientes_borrar", scope: scopeBorrar, class: classOther, h: s.handleDeleteCliente},
		{method: http.MethodGet, path: "/v1/clientes/:cliente_ref/exportacion", name: "clientes_exportar", scope: scopeExportar, class: classOther, h: s.handleExportCliente},

		{method: http.MethodPut, path: "/v1/webhooks", name: "webhooks_put", scope: scopeWebhooks, class: classOther, maxBody: smallBody, h: s.handlePutWebhook},
		{method: http.MethodDelete, path: "/v1/webhooks", name: "webhooks_delete", scope: scopeWebhooks, class: classOther, h: s.handleDeleteWebhook},
	}
}
