// Package api holds the bodies of the v1 API that more than one package
// speaks: the server and the engine write them, the Go SDK (package client)
// reads them and re-exports them under the same names. One definition each,
// so the server's answers and the SDK's types cannot drift apart.
//
// It imports only the standard library, as the SDK must. A field the
// OpenAPI document requires has no omitempty; an optional one has
// omitempty; a field that may be null is a pointer, slice or map. Changing a
// field here changes the bytes the server writes and, for the types the
// store keeps (RegistroWebhook), the stored records.
package api

import "time"

// Detalle is the engine's view of every eligible action of a decision
// (scope explicar:leer): the expected value μ (MXN over the reward window)
// and its uncertainty for every eligible action, 0 included, and the
// probability with which each was drawn.
type Detalle struct {
	Acciones []DetalleAccion `json:"acciones"`
}

// DetalleAccion is one action in Detalle.
type DetalleAccion struct {
	Accion       int     `json:"accion"`
	MuMXN        float64 `json:"mu_mxn"`
	SigmaMXN     float64 `json:"sigma_mxn"`
	Probabilidad float64 `json:"probabilidad"`
}

// RespuestaEventos is the answer of POST /v1/eventos.
type RespuestaEventos struct {
	Aceptados  int       `json:"aceptados"`
	Duplicados int       `json:"duplicados"`
	Rechazados []Rechazo `json:"rechazados"`
}

// Rechazo is one rejected event of POST /v1/eventos: Indice is the event's
// index in the request's eventos, EventID its event_id when it had a string
// one, Campo the dotted path of the failing member (nil when the event as a
// whole fails).
type Rechazo struct {
	Indice  int     `json:"indice"`
	EventID *string `json:"event_id"`
	Codigo  string  `json:"codigo"`
	Campo   *string `json:"campo"`
	Mensaje string  `json:"mensaje"`
}

// Batch job states (EstadoLote.Estado; spec: States and transitions, batch
// job). A job goes en_cola → en_curso → completado or fallido.
const (
	EstadoEnCola     = "en_cola"
	EstadoEnCurso    = "en_curso"
	EstadoCompletado = "completado"
	EstadoFallido    = "fallido"
)

// RegistroWebhook is a tenant's webhook registration: the answer of
// PUT /v1/webhooks and, as it is, the stored record of the registration.
// Secreto ("whsec_" + base64 of the key) is kept as issued: the server signs
// deliveries with it and shows it once, when it is issued.
type RegistroWebhook struct {
	URL      string    `json:"url"`
	Eventos  []string  `json:"eventos"`
	Secreto  string    `json:"secreto"`
	CreadoEn time.Time `json:"creado_en"`
}
