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

import (
	"strconv"
	"strings"
	"time"
)

// Decision is the answer of POST /v1/decisiones and, with cliente_ref, one
// line of a batch result: the engine writes it (engine.Decision, this body
// with the engine's encoder), the SDK reads it (client.Decision).
//
// EnSombra is true, and present, only for a tenant in shadow mode; it is
// never sent false. Causa is no member of the body: only the SDK sets it,
// on a Decision it made up from the caller's fallback action, to say why
// (see client.Decision); the server never sets it.
type Decision struct {
	DecisionID      string    `json:"decision_id"`
	Accion          int       `json:"accion"`
	AccionNombre    string    `json:"accion_nombre"`
	Propension      float64   `json:"propension"`
	PoliticaVersion string    `json:"politica_version"`
	Explorado       bool      `json:"explorado"`
	EnControl       bool      `json:"en_control"`
	EnRespaldo      bool      `json:"en_respaldo"`
	CaducaEn        time.Time `json:"caduca_en"`
	Motivo          string    `json:"motivo"`
	Detalle         *Detalle  `json:"detalle,omitempty"`
	EnSombra        bool      `json:"en_sombra,omitempty"`

	Causa error `json:"-"`
}

// Detalle is the engine's view of every eligible action of a decision
// (scope explicar:leer): the expected value μ (MXN over the reward window)
// and its uncertainty for every eligible action, 0 included, and the
// probability with which each was drawn.
type Detalle struct {
	Acciones []DetalleAccion `json:"acciones"`
}

// MotivoVentanaAbierta begins the Motivo of the answer to a decision
// request for a customer whose reward window is open (contract: accion 0,
// propension 1, the open decision's decision_id; nothing new is decided).
const MotivoVentanaAbierta = "ventana de recompensa abierta hasta "

// VentanaAbierta reports whether d is the answer for a customer whose
// reward window is open: the open decision's DecisionID with accion 0 and
// nothing new decided. It needs no confirmation: the open decision is
// confirmed by its own answer's, and confirming this one (ejecutada) would
// confirm the open decision's coupon, even when its own answer's
// confirmation (ejecutada false, say) was still to come.
func (d *Decision) VentanaAbierta() bool {
	return strings.HasPrefix(d.Motivo, MotivoVentanaAbierta)
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
// one (the server's answer cuts it to 256 characters), Campo the dotted path
// of the failing member (nil when the event as a whole fails).
type Rechazo struct {
	Indice  int     `json:"indice"`
	EventID *string `json:"event_id"`
	Codigo  string  `json:"codigo"`
	Campo   *string `json:"campo"`
	Mensaje string  `json:"mensaje"`
}

// String writes r for a log or an error, with what its pointers hold (the
// %+v of the struct shows their addresses): `event 3 "tk-1-bad":
// esquema_invalido: Field required (campo extra.margen)`, without the
// event_id or campo it lacks.
func (r Rechazo) String() string {
	s := "event " + strconv.Itoa(r.Indice)
	if r.EventID != nil {
		s += " " + strconv.Quote(*r.EventID)
	}
	s += ": " + r.Codigo + ": " + r.Mensaje
	if r.Campo != nil {
		s += " (campo " + *r.Campo + ")"
	}
	return s
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
