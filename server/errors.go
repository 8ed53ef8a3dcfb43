package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/coupond/coupond/server/schema"
)

// kind is what went wrong, independent of how it is told to the client.
type kind int

const (
	kindUnauthenticated kind = iota + 1
	kindForbidden
	kindNotFound
	kindAlreadyConfirmed
	kindExpired
	kindIdempotencyConflict
	kindTooLarge
	kindNotJSON
	kindRateLimited
	kindPaused
	kindInternal
)

// errorTable is the one table from error kind to HTTP status and codigo.
var errorTable = map[kind]struct {
	status int
	codigo string
	msg    string
}{
	kindUnauthenticated:     {http.StatusUnauthorized, "no_autenticado", "credenciales o token ausentes, inválidos o caducados"},
	kindForbidden:           {http.StatusForbidden, "sin_permiso", "la credencial no tiene el permiso necesario"},
	kindNotFound:            {http.StatusNotFound, "no_encontrado", "recurso no encontrado"},
	kindAlreadyConfirmed:    {http.StatusConflict, "ejecucion_ya_confirmada", "la ejecución de esta decisión ya fue confirmada"},
	kindExpired:             {http.StatusConflict, "decision_caducada", "el plazo de confirmación de la decisión venció"},
	kindIdempotencyConflict: {http.StatusConflict, "idempotencia_conflicto", "Idempotency-Key ya usada con otro cuerpo o aún en curso"},
	kindTooLarge:            {http.StatusRequestEntityTooLarge, "esquema_invalido", "el cuerpo excede el tamaño máximo"},
	kindNotJSON:             {http.StatusUnsupportedMediaType, "esquema_invalido", "el cuerpo debe ser JSON (Content-Type: application/json)"},
	kindRateLimited:         {http.StatusTooManyRequests, "limite_excedido", "límite de uso excedido; reintente tras Retry-After segundos"},
	kindPaused:              {http.StatusServiceUnavailable, "inquilino_pausado", "el inquilino está pausado por el operador"},
	kindInternal:            {http.StatusInternalServerError, "error_interno", "error interno; cite el trace_id a soporte"},
}

// apiError is an error answered with the ErrorV1 body.
type apiError struct {
	kind       kind
	msg        string // overrides the table's message when set
	campo      string
	detalle    map[string]any
	retryAfter int // seconds; set for 429 and 503
	basic      bool
}

func (e *apiError) Error() string { return errorTable[e.kind].codigo }

func errKind(k kind) *apiError { return &apiError{kind: k} }

// validationError is answered with 422 HTTPValidationError.
type validationError struct{ detail []schema.Violation }

func (e *validationError) Error() string { return "validation failed" }

// joinValidation merges the validation errors of a request's parts (path,
// header, body) so that a 422 lists every violation at once (contract
// section 7). Another kind of error is returned as is.
func joinValidation(errs ...error) error {
	var all []schema.Violation
	for _, err := range errs {
		var v *validationError
		switch {
		case err == nil:
		case errors.As(err, &v):
			all = append(all, v.detail...)
		default:
			return err
		}
	}
	if len(all) == 0 {
		return nil
	}
	return &validationError{detail: all}
}

// errorV1 is the ErrorV1 body.
type errorV1 struct {
	Codigo  string         `json:"codigo"`
	Mensaje string         `json:"mensaje"`
	Campo   *string        `json:"campo"`
	Detalle map[string]any `json:"detalle"`
	TraceID string         `json:"trace_id"`
}

// writeError answers err. Only internal errors are logged with detail; the
// body never carries internals.
func (s *Server) writeError(w http.ResponseWriter, c *call, err error) {
	var ve *validationError
	if errors.As(err, &ve) {
		detail := ve.detail
		if detail == nil {
			detail = []schema.Violation{}
		}
		writeJSON(w, http.StatusUnprocessableEntity, struct {
			Detail []schema.Violation `json:"detail"`
		}{detail})
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		s.log.Error().Err(err).Str("trace_id", c.trace).Str("route", c.route).Msg("internal error")
		ae = errKind(kindInternal)
	}
	row := errorTable[ae.kind]
	body := errorV1{Codigo: row.codigo, Mensaje: row.msg, Detalle: ae.detalle, TraceID: c.trace}
	if ae.msg != "" {
		body.Mensaje = ae.msg
	}
	body.Mensaje = truncateRunes(body.Mensaje, 512)
	if ae.campo != "" {
		body.Campo = &ae.campo
	}
	h := w.Header()
	switch ae.kind {
	case kindUnauthenticated:
		if ae.basic {
			h.Set("WWW-Authenticate", `Basic realm="coupond"`)
		} else {
			h.Set("WWW-Authenticate", `Bearer realm="coupond"`)
		}
	case kindRateLimited, kindPaused:
		h.Set("Retry-After", strconv.Itoa(max(ae.retryAfter, 1)))
	}
	writeJSON(w, row.status, body)
}

// writeJSON encodes v as the response body with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := encodeJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"codigo":"error_interno","mensaje":"error interno","campo":null,"detalle":null,"trace_id":null}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

// jsonAppender is an answer that encodes itself as encoding/json would
// (engine.Decision): the hot answers skip encoding/json's reflection.
type jsonAppender interface {
	AppendJSON(b []byte) ([]byte, bool)
}

// encodeJSON encodes v with its own AppendJSON when it has one.
func encodeJSON(v any) ([]byte, error) {
	if a, ok := v.(jsonAppender); ok {
		if data, ok := a.AppendJSON(make([]byte, 0, 512)); ok {
			return data, nil
		}
	}
	return json.Marshal(v)
}

// truncateRunes cuts s to at most n characters without splitting one.
func truncateRunes(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}
