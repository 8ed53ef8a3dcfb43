package client

import (
	"time"

	"github.com/coupond/coupond/api"
)

// The types below are the bodies of the v1 API, one Go type per schema of
// the OpenAPI document (GET /v1/openapi.json), named after the schema where
// the name is free. A field the document requires has no omitempty; an
// optional one has omitempty (or omitzero where an empty list means
// something); a field that may be null is a pointer, slice or map.
// TestTypesMatchOpenAPI compares every type here with the document served
// by the real server, field by field, so the two cannot drift. The types
// the server writes from more than one package are aliases of package
// api's, their one definition.
//
// Money is MXN without VAT as a float64 with at most two decimals; the
// server refuses more. PublishEvents sends an event's money (valor,
// margen, ticket_total) that is whole cents but for float64 rounding
// noise as those cents: a sum of prices such as 0.1+0.2 goes as 0.3, not
// 0.30000000000000004. Times are sent as RFC 3339 and come back in UTC.

// Ptr returns a pointer to v, for the optional fields of requests whose
// zero value means something (Ptr(0.0), Ptr(false)).
func Ptr[T any](v T) *T { return &v }

// PeticionDecision is the body of POST /v1/decisiones.
type PeticionDecision struct {
	ClienteRef string   `json:"cliente_ref"`
	Contexto   Contexto `json:"contexto"`
}

// Contexto is the context of an online decision.
type Contexto struct {
	Canal     string `json:"canal"`
	CampanaID string `json:"campana_id,omitempty"`
	// AccionesPermitidas limits the answer to these actions or 0. nil sends
	// nothing (every action allowed); an empty non-nil slice allows only 0.
	AccionesPermitidas []int `json:"acciones_permitidas,omitzero"`
}

// Decision is the answer of POST /v1/decisiones.
//
// A Decision that Decide made up from the caller's fallback action because
// the engine did not answer in time has EnRespaldo true, no DecisionID,
// Propension 1 and the cause in Causa; the library records it with
// POST /v1/decisiones/respaldo in the background. Causa is why Decide
// answered the fallback (nil for the engine's own decisions):
// ErrBreakerOpen, ErrBudgetExhausted wrapping the last failure, or the
// *Error of a paused tenant. It is not part of the API body.
type Decision = api.Decision

// Detalle is the engine's view of every eligible action (scope
// explicar:leer).
type Detalle = api.Detalle

// DetalleAccion is one action in Detalle.
type DetalleAccion = api.DetalleAccion

// PeticionEjecucion is the body of POST /v1/decisiones/{decision_id}/ejecucion.
type PeticionEjecucion struct {
	Ejecutada     bool       `json:"ejecutada"`
	AccionReal    *int       `json:"accion_real,omitempty"`
	MotivoRechazo *string    `json:"motivo_rechazo,omitempty"`
	TsEjecucion   *time.Time `json:"ts_ejecucion,omitempty"`
}

// RespuestaEjecucion is the answer of a confirmation.
type RespuestaEjecucion struct {
	DecisionID      string `json:"decision_id"`
	EstadoEjecucion string `json:"estado_ejecucion"`
}

// PeticionRespaldo is the body of POST /v1/decisiones/respaldo, the record
// of a decision the caller took by its own rule.
type PeticionRespaldo struct {
	Accion     int    `json:"accion"`
	Canal      string `json:"canal"`
	ClienteRef string `json:"cliente_ref"`
	CampanaID  string `json:"campana_id,omitempty"`
}

// Event types (Evento.Tipo).
const (
	CompraCat     = "COMPRA_CAT"
	CuponRecibido = "CUPON_RECIBIDO"
	CuponRedimido = "CUPON_REDIMIDO"
	CuponCaducado = "CUPON_CADUCADO"
	Baja          = "BAJA"
	Alta          = "ALTA"
)

// Evento is one event of POST /v1/eventos. Its Extra is the type of its
// Tipo: *ExtraCompraCat for COMPRA_CAT, *ExtraCuponRecibido for
// CUPON_RECIBIDO and so on. Valor is required for COMPRA_CAT (the lines'
// amount) and CUPON_REDIMIDO (the discount applied), optional for
// CUPON_RECIBIDO (the coupon's maximum discount in MXN, 0 for a
// percentage) and, if set, 0 for the others; Extra is required but for
// BAJA and ALTA.
type Evento struct {
	EventID    string      `json:"event_id"`
	ClienteRef string      `json:"cliente_ref"`
	Ts         time.Time   `json:"ts"`
	DecisionID *string     `json:"decision_id,omitempty"`
	Tipo       string      `json:"tipo"`
	Clave      string      `json:"clave"`
	Valor      *float64    `json:"valor,omitempty"`
	Extra      ExtraEvento `json:"extra,omitempty"`
}

// ExtraEvento is the extra object of one event type; the Extra* types of
// this package implement it.
type ExtraEvento interface{ tipoEvento() string }

// ExtraCompraCat is the extra of COMPRA_CAT.
type ExtraCompraCat struct {
	TicketID    string   `json:"ticket_id"`
	Margen      float64  `json:"margen"`
	Cantidad    *float64 `json:"cantidad,omitempty"`
	Tienda      *string  `json:"tienda,omitempty"`
	Canal       *string  `json:"canal,omitempty"`
	TicketTotal *float64 `json:"ticket_total,omitempty"`
}

// ExtraCuponRecibido is the extra of CUPON_RECIBIDO.
type ExtraCuponRecibido struct {
	CuponEmitidoID string    `json:"cupon_emitido_id"`
	CampanaID      *string   `json:"campana_id,omitempty"`
	Caducidad      time.Time `json:"caducidad"`
	Canal          *string   `json:"canal,omitempty"`
	DescuentoPct   *float64  `json:"descuento_pct,omitempty"`
}

// ExtraCuponRedimido is the extra of CUPON_REDIMIDO.
type ExtraCuponRedimido struct {
	CuponEmitidoID string `json:"cupon_emitido_id"`
	TicketID       string `json:"ticket_id"`
}

// ExtraCuponCaducado is the extra of CUPON_CADUCADO.
type ExtraCuponCaducado struct {
	CuponEmitidoID string `json:"cupon_emitido_id"`
}

// ExtraBaja is the extra of BAJA.
type ExtraBaja struct {
	Canal *string `json:"canal,omitempty"`
}

// ExtraAlta is the extra of ALTA.
type ExtraAlta struct {
	Segmento *string `json:"segmento,omitempty"`
	Perfil   *string `json:"perfil,omitempty"`
}

func (*ExtraCompraCat) tipoEvento() string     { return CompraCat }
func (*ExtraCuponRecibido) tipoEvento() string { return CuponRecibido }
func (*ExtraCuponRedimido) tipoEvento() string { return CuponRedimido }
func (*ExtraCuponCaducado) tipoEvento() string { return CuponCaducado }
func (*ExtraBaja) tipoEvento() string          { return Baja }
func (*ExtraAlta) tipoEvento() string          { return Alta }

// RespuestaEventos is the answer of POST /v1/eventos, and what
// PublishEvents returns for all its requests together.
type RespuestaEventos = api.RespuestaEventos

// Rechazo is one rejected event. From PublishEvents, Indice is the event's
// index in the caller's slice, not in one request.
type Rechazo = api.Rechazo

// Campana is the body of PUT /v1/campanas/{campana_id}.
type Campana struct {
	Canal           string   `json:"canal"`
	Descripcion     string   `json:"descripcion"`
	MaxDescuentoMXN *float64 `json:"max_descuento_mxn,omitempty"`
	MaxEnvios       *int64   `json:"max_envios,omitempty"`
}

// CampanaRespuesta is a stored campaign.
type CampanaRespuesta struct {
	CampanaID       string    `json:"campana_id"`
	Canal           string    `json:"canal"`
	Descripcion     string    `json:"descripcion"`
	MaxDescuentoMXN *float64  `json:"max_descuento_mxn"`
	MaxEnvios       *int64    `json:"max_envios"`
	CreadoEn        time.Time `json:"creado_en"`
	ActualizadoEn   time.Time `json:"actualizado_en"`
}

// Catalogo is the body of PUT /v1/catalogo-acciones.
type Catalogo struct {
	Acciones []AccionCatalogo `json:"acciones"`
}

// AccionCatalogo is one coupon of the catalog. Absent or empty Canales:
// every channel; absent Categorias: the whole basket.
type AccionCatalogo struct {
	ID              int      `json:"id"`
	Nombre          string   `json:"nombre"`
	TipoCupon       string   `json:"tipo_cupon"`
	CostoEnvioMXN   float64  `json:"costo_envio_mxn"`
	DescuentoMaxMXN *float64 `json:"descuento_max_mxn,omitempty"`
	DescuentoPct    *float64 `json:"descuento_pct,omitempty"`
	Canales         []string `json:"canales,omitempty"`
	Activa          *bool    `json:"activa,omitempty"`
	Categorias      []string `json:"categorias,omitempty"`
}

// CatalogoRespuesta is the stored catalog with its version.
type CatalogoRespuesta struct {
	Acciones []AccionCatalogoRespuesta `json:"acciones"`
	Version  int64                     `json:"version"`
}

// AccionCatalogoRespuesta is one coupon of the stored catalog.
type AccionCatalogoRespuesta struct {
	ID              int      `json:"id"`
	Nombre          string   `json:"nombre"`
	TipoCupon       string   `json:"tipo_cupon"`
	CostoEnvioMXN   float64  `json:"costo_envio_mxn"`
	DescuentoMaxMXN float64  `json:"descuento_max_mxn"`
	DescuentoPct    float64  `json:"descuento_pct"`
	Canales         []string `json:"canales,omitempty"`
	Activa          bool     `json:"activa"`
	Categorias      []string `json:"categorias,omitempty"`
}

// RegistroBorrado is the answer of DELETE /v1/clientes/{cliente_ref}.
type RegistroBorrado struct {
	ClienteRef string `json:"cliente_ref"`
	Estado     string `json:"estado"`
}

// ExportacionCliente is everything the engine holds about a customer
// (GET /v1/clientes/{cliente_ref}/exportacion).
type ExportacionCliente struct {
	ClienteRef      string                  `json:"cliente_ref"`
	GeneradoEn      time.Time               `json:"generado_en"`
	Eventos         []EventoExportado       `json:"eventos"`
	Caracteristicas map[string]any          `json:"caracteristicas"`
	Decisiones      []DecisionExportada     `json:"decisiones"`
	Confirmaciones  []ConfirmacionExportada `json:"confirmaciones"`
	VinculosCupon   []VinculoCupon          `json:"vinculos_cupon"`
	Borrado         *BorradoExportado       `json:"borrado"`
	// EnCuarentena counts records held about the customer that could not
	// be read back (quarantined, never exported, erased by the deletion).
	EnCuarentena int `json:"en_cuarentena"`
}

// EventoExportado is a stored event.
type EventoExportado struct {
	EventID    string         `json:"event_id"`
	ClienteRef string         `json:"cliente_ref"`
	Ts         time.Time      `json:"ts"`
	Tipo       string         `json:"tipo"`
	Clave      string         `json:"clave"`
	Valor      float64        `json:"valor"`
	DecisionID *string        `json:"decision_id"`
	Extra      map[string]any `json:"extra"`
}

// DecisionExportada is a stored decision (fallback records included, with
// EnRespaldo true).
type DecisionExportada struct {
	DecisionID            string             `json:"decision_id"`
	CreadaEn              time.Time          `json:"creada_en"`
	Canal                 string             `json:"canal,omitempty"`
	CampanaID             string             `json:"campana_id,omitempty"`
	JobID                 string             `json:"job_id,omitempty"`
	Accion                int                `json:"accion"`
	Propension            float64            `json:"propension"`
	PoliticaVersion       string             `json:"politica_version"`
	Explorado             bool               `json:"explorado"`
	EnControl             bool               `json:"en_control"`
	EnRespaldo            bool               `json:"en_respaldo"`
	EnSombra              bool               `json:"en_sombra"`
	CaducaEn              time.Time          `json:"caduca_en"`
	Motivo                string             `json:"motivo"`
	EstadoEjecucion       string             `json:"estado_ejecucion"` // pendiente until confirmed (for good once past the confirmation deadline), then ejecutada, modificada or rechazada
	RecompensaMXN         *float64           `json:"recompensa_mxn,omitempty"`
	CaracteristicasUsadas map[string]float64 `json:"caracteristicas_usadas,omitempty"`
}

// ConfirmacionExportada is a stored confirmation.
type ConfirmacionExportada struct {
	DecisionID      string     `json:"decision_id"`
	EstadoEjecucion string     `json:"estado_ejecucion"`
	AccionReal      *int       `json:"accion_real"`
	MotivoRechazo   *string    `json:"motivo_rechazo"`
	TsEjecucion     *time.Time `json:"ts_ejecucion"`
	ConfirmadaEn    time.Time  `json:"confirmada_en"`
}

// VinculoCupon links a coupon sent to its decision.
type VinculoCupon struct {
	CuponEmitidoID string  `json:"cupon_emitido_id"`
	DecisionID     *string `json:"decision_id"`
	Recibido       bool    `json:"recibido"`
	Redimido       bool    `json:"redimido"`
	Caducado       bool    `json:"caducado"`
}

// BorradoExportado is a pending or completed deletion.
type BorradoExportado struct {
	Estado       string     `json:"estado"`
	SolicitadoEn time.Time  `json:"solicitado_en"`
	CompletadoEn *time.Time `json:"completado_en"`
}

// Batch job states (EstadoLote.Estado).
const (
	EstadoEnCola     = api.EstadoEnCola
	EstadoEnCurso    = api.EstadoEnCurso
	EstadoCompletado = api.EstadoCompletado
	EstadoFallido    = api.EstadoFallido
)

// PeticionLoteDecision is the body of POST /v1/lotes-decision
// (PeticionLoteDecisionV1): exactly one of Clientes or Segmento. A nil
// Clientes is left out; an empty one is sent, and refused on clientes (a
// job lists 1 to 500,000 customers).
type PeticionLoteDecision struct {
	CampanaID string   `json:"campana_id"`
	Clientes  []string `json:"clientes,omitzero"`
	Segmento  Segmento `json:"segmento,omitempty"`
}

// Segmento is a filter over customer features, such as
// {"<=": {"recencia_dias": 30}} combined with "y", "o" and "no", or
// SegmentoTodos.
type Segmento map[string]any

// SegmentoTodos returns the segment of every customer with history.
func SegmentoTodos() Segmento { return Segmento{"todos": true} }

// RespuestaLoteDecision is the answer of POST /v1/lotes-decision
// (RespuestaLoteDecisionV1).
type RespuestaLoteDecision struct {
	JobID        string    `json:"job_id"`
	Estado       string    `json:"estado"`
	CreadoEn     time.Time `json:"creado_en"`
	ResultadoURL string    `json:"resultado_url,omitempty"`
}

// EstadoLote is the state of a batch job (GET /v1/lotes-decision/{job_id}).
type EstadoLote struct {
	JobID             string     `json:"job_id"`
	Estado            string     `json:"estado"`
	CreadoEn          time.Time  `json:"creado_en"`
	CampanaID         string     `json:"campana_id"`
	Total             int        `json:"total"`
	Procesados        int        `json:"procesados"`
	IniciadoEn        *time.Time `json:"iniciado_en"`
	CompletadoEn      *time.Time `json:"completado_en"`
	ResultadoURL      string     `json:"resultado_url,omitempty"`
	ResultadoExpiraEn *time.Time `json:"resultado_expira_en,omitempty"`
	Error             string     `json:"error,omitempty"`
}

// LineaResultado is one line of a batch result: a decision plus its
// customer.
type LineaResultado struct {
	Decision
	ClienteRef string `json:"cliente_ref"`
}

// PeticionWebhook is the body of PUT /v1/webhooks.
type PeticionWebhook struct {
	URL     string   `json:"url"`
	Eventos []string `json:"eventos"`
}

// RegistroWebhook is a webhook registration; Secreto ("whsec_…") is shown
// once and is what VerifyWebhook needs.
type RegistroWebhook = api.RegistroWebhook

// LoteCompletado is the payload of the lote.completado webhook.
type LoteCompletado struct {
	Tipo         string    `json:"tipo"`
	JobID        string    `json:"job_id"`
	CampanaID    string    `json:"campana_id"`
	Estado       string    `json:"estado"`
	Lineas       int       `json:"lineas"`
	CompletadoEn time.Time `json:"completado_en"`
}

// ErrorV1 is the error body of every 4xx and 5xx but 422.
type ErrorV1 struct {
	Codigo  string         `json:"codigo"`
	Mensaje string         `json:"mensaje"`
	Campo   *string        `json:"campo"`
	Detalle map[string]any `json:"detalle"`
	TraceID string         `json:"trace_id"`
}

// HTTPValidationError is the body of a 422.
type HTTPValidationError struct {
	Detail []ValidationItem `json:"detail"`
}

// ValidationItem is one violation of a 422 (schema ValidationError): Loc
// is the path of the failing part ("body", "cliente_ref"), Type the pydantic
// v2 name (missing, string_too_short, ...).
type ValidationItem = api.ValidationItem

// objetoVacio is the empty answer of the fallback record and of
// DELETE /v1/webhooks.
type objetoVacio struct{}
