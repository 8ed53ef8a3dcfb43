package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/jsonappend"
	"github.com/coupond/coupond/server/schema"
	"github.com/coupond/coupond/store"
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
	kindStorageFull
	kindBadRequest
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
	kindStorageFull:         {http.StatusServiceUnavailable, "almacenamiento_lleno", "almacenamiento casi lleno: las escrituras se reanudan solas cuando haya espacio; reintente tras Retry-After segundos"},
	kindBadRequest:          {http.StatusBadRequest, "esquema_invalido", "petición mal enmarcada: el cuerpo llegó roto, incompleto o a destiempo"},
}

// storageStopped is the mensaje of 503 almacenamiento_lleno once a write
// failed inside the store (store.ErrFailed) and only an operator's restart
// resumes writes (store.SpaceStatus.RestartNeeded), which kindStorageFull's
// own mensaje does not say. When the store failed for want of space and
// serve restarts itself once space is back, kindStorageFull's mensaje
// holds.
const storageStopped = "el almacén dejó de aceptar escrituras tras un fallo del disco; se reanudan cuando se reinicie coupond; reintente tras Retry-After segundos"

// storageNoFiles is the mensaje of 503 almacenamiento_lleno once a write
// failed inside the store for want of file descriptors and serve restarts
// itself once it can open files again (store.SpaceStatus.NoFiles).
const storageNoFiles = "el almacén dejó de aceptar escrituras por falta de descriptores de archivo; se reanudan solas en cuanto coupond pueda abrir archivos; reintente tras Retry-After segundos"

// storageFull is the 503 almacenamiento_lleno of a write the store
// refuses, sp the store's state; failed: the write failed inside the
// store (store.ErrFailed). When only an operator's restart ends it, or it
// ends once files can be opened again, the mensaje says so.
func storageFull(sp store.SpaceStatus, failed bool) *apiError {
	ae := &apiError{kind: kindStorageFull, retryAfter: storageRetry}
	switch {
	case failed && sp.RestartNeeded():
		ae.msg = storageStopped
	case failed && sp.NoFiles:
		ae.msg = storageNoFiles
	}
	return ae
}

// storageNoDescriptors is the mensaje of 503 almacenamiento_lleno of a
// write whose store read or write could not open a file for want of
// descriptors, the store itself not failed (withoutDescriptors).
const storageNoDescriptors = "el servidor se quedó sin descriptores de archivo; reintente tras Retry-After segundos"

// descriptorsRetry is the Retry-After of storageNoDescriptors, in seconds:
// descriptors come back as soon as connections or files close.
const descriptorsRetry = 5

// withoutDescriptors is err as a write route answers it: 503
// almacenamiento_lleno (storageNoDescriptors) when err is the lack of file
// descriptors (EMFILE, the process's limit; ENFILE, the system's) that did
// not fail the store (a store read that could not open a table), logged
// as a warning; err itself otherwise. It answered 500 error_interno (on the
// real binary under ulimit -n 200: 90 events batches in 20 s), which
// tells the client a fault in coupond rather than a wait. Another route
// (GET, DELETE) keeps its 500: its contract has no 503
// almacenamiento_lleno, reads go on below the reserve.
func (s *Server) withoutDescriptors(rt route, c *call, err error) error {
	var ae *apiError
	if !refusesWrites(rt) || errors.As(err, &ae) || errors.Is(err, store.ErrFull) || errors.Is(err, store.ErrFailed) ||
		!(errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
		return err
	}
	s.log.Warn().Err(err).Str("trace_id", c.trace).Str("route", c.route).Msg("write refused: no file descriptor left")
	return &apiError{kind: kindStorageFull, msg: storageNoDescriptors, retryAfter: descriptorsRetry}
}

// pausedRetry is the Retry-After of 503 inquilino_pausado, in seconds.
const pausedRetry = 60

// errPaused is the 503 inquilino_pausado of a paused tenant's request.
func errPaused() *apiError { return &apiError{kind: kindPaused, retryAfter: pausedRetry} }

// storageRetry is the Retry-After of 503 almacenamiento_lleno, in seconds.
const storageRetry = 30

// apiError is an error answered with the ErrorV1 body.
type apiError struct {
	kind       kind
	msg        string // overrides the table's message when set
	campo      string
	detalle    map[string]any
	retryAfter int // seconds; set for 429 and 503
	basic      bool
	oauth      oauthError // POST /v1/token only: RFC 6749 5.2 error beside the contract's fields
	// inFlight marks a 409 idempotencia_conflicto whose key's first
	// request still runs (idemConflict): pastQuota answers it as it is.
	inFlight bool
}

// oauthError is an RFC 6749 section 5.2 error code and its description
// (ASCII, as the RFC requires). The token endpoint adds both to its error
// bodies as "error" and "error_description", so that stock OAuth clients
// report the cause.
type oauthError struct{ code, description string }

func (e *apiError) Error() string { return errorTable[e.kind].codigo }

func errKind(k kind) *apiError { return &apiError{kind: k} }

// errMissingScope is the 403 sin_permiso of a route that needs scope: its
// mensaje names the scope, so that the integrator knows what to ask the
// operator to add to the credential.
func errMissingScope(need scope) *apiError {
	return &apiError{kind: kindForbidden, msg: errorTable[kindForbidden].msg + ": " + need.String()}
}

// errScopesNotGranted is the token request's 403 sin_permiso for the
// scopes it asks that the credential lacks (lacking) or that no release
// knows (unknown, echoed redacted, at most three): its mensaje names them,
// as a route's names the scope it needs, so that the integrator knows what
// to ask the operator to add or what to correct.
func errScopesNotGranted(lacking scope, unknown []string) *apiError {
	var parts []string
	if lacking != 0 {
		parts = append(parts, lacking.String())
	}
	for i, n := range unknown {
		if i == 3 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, strconv.Quote(echoString(n))+" (desconocido)")
	}
	return &apiError{kind: kindForbidden, msg: "la credencial no tiene los permisos pedidos en scope: " + strings.Join(parts, " "), campo: "scope"}
}

// validationError is answered with 422 HTTPValidationError.
type validationError struct {
	detail []schema.Violation
	oauth  oauthError // as apiError.oauth
}

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

// writeError answers err. Only internal errors are logged with detail; the
// body never carries internals.
func (s *Server) writeError(w http.ResponseWriter, c *call, err error) {
	var ve *validationError
	if errors.As(err, &ve) {
		s.countError(c, "422")
		detail := redactViolations(ve.detail)
		writeJSON(w, http.StatusUnprocessableEntity, struct {
			Detail []schema.Violation `json:"detail"`
			oauthFields
		}{detail, ve.oauth.fields()})
		return
	}
	var ae *apiError
	if errors.Is(err, store.ErrFull) || errors.Is(err, store.ErrFailed) {
		s.log.Warn().Err(err).Str("trace_id", c.trace).Str("route", c.route).Msg("write refused: storage full")
		ae = storageFull(s.DB.Space(), errors.Is(err, store.ErrFailed))
	} else if errors.Is(err, engine.ErrNoTenant) || errors.Is(err, store.ErrTenantErased) {
		// Its tenant was deleted after the request passed authentication
		// (privacy.Service.DeleteTenant hid it, the engine forgot it, the
		// store refused its write once the tenant was erased): it is
		// answered as every later request of the tenant is.
		ae = errKind(kindUnauthenticated)
	} else if !errors.As(err, &ae) {
		ev := s.log.Error()
		if c.r.Context().Err() != nil {
			ev = s.log.Debug() // the client went away: the access log says 499
		}
		ev.Err(err).Str("trace_id", c.trace).Str("route", c.route).Msg("internal error")
		ae = errKind(kindInternal)
	}
	row := errorTable[ae.kind]
	c.codigo = row.codigo
	s.countError(c, row.codigo)
	body := client.ErrorV1{Codigo: row.codigo, Mensaje: row.msg, Detalle: ae.detalle, TraceID: c.trace}
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
			h.Set("WWW-Authenticate", "Basic")
		} else {
			h.Set("WWW-Authenticate", "Bearer")
		}
	case kindRateLimited, kindPaused, kindStorageFull:
		h.Set("Retry-After", strconv.Itoa(max(ae.retryAfter, 1)))
	}
	if ae.oauth.code != "" {
		writeJSON(w, row.status, struct {
			client.ErrorV1
			oauthFields
		}{body, ae.oauth.fields()})
		return
	}
	writeJSON(w, row.status, body)
}

// oauthFields are the RFC 6749 members of a token endpoint error body;
// both are omitted when empty.
type oauthFields struct {
	Error            string `json:"error,omitempty"`
	ErrorDescription string `json:"error_description,omitempty"`
}

func (o oauthError) fields() oauthFields { return oauthFields{o.code, o.description} }

// writeJSON encodes v as the response body with the given status. It is
// the one JSON writer of the API: strings are not HTML-escaped (a
// resultado_url keeps its "&" instead of "\u0026", so it survives a human
// copy and paste), and the body ends with a newline.
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

// secretMembers are the members whose values a 422 never echoes (contract
// section 8): their input is "***" wherever they appear.
var secretMembers = map[string]bool{"client_secret": true, "secreto": true, "access_token": true, "token": true, "refresh_token": true}

// maxEcho is how many characters of a string a 422 echoes.
const maxEcho = 256

// secretMarkers begin the secrets coupond issues: client secrets, access
// tokens (ct1. of older releases included) and webhook signing secrets.
var secretMarkers = []string{"cs_", "ct1.", "ct2.", "whsec_"}

// secretMarkerTail is how many base64 characters after a marker make a
// string look like a secret (the shortest secret issued carries 43).
const secretMarkerTail = 16

// looksSecret reports whether s holds a secret coupond issued, by its
// shape, whatever member carried it: a marker of secretMarkers, not inside
// a word, followed by
// at least secretMarkerTail characters of the base64 alphabets, so that
// a misnamed client_secret ("clientSecret", "secret") or a token sent in
// a body is not echoed either (contract section 8).
func looksSecret(s string) bool {
	_, _, ok := secretSpan(s)
	return ok
}

// secretSpan returns where the first secret-shaped part of s (as
// looksSecret has it) begins and ends: its marker and every base64
// character after it.
func secretSpan(s string) (start, end int, ok bool) {
	for _, m := range secretMarkers {
		for from := 0; ; {
			i := strings.Index(s[from:], m)
			if i < 0 {
				break
			}
			start, end = from+i, from+i+len(m)
			from = end
			// A marker inside a word ("docs_…", "metrics_…") begins none.
			if start > 0 && isAlnum(s[start-1]) {
				continue
			}
			for end < len(s) && isBase64Char(s[end]) {
				end++
			}
			if end-from >= secretMarkerTail {
				return start, end, true
			}
		}
	}
	return 0, 0, false
}

// echoMsg is how a 422 echoes its msg, which may quote what was sent (an
// unknown segment operator or feature, a URL's port or host): every
// secret-shaped part is "***" and the whole is cut to maxEcho characters,
// as every echoed string is (contract section 8). The msgs coupond words
// itself are shorter.
func echoMsg(msg string) string {
	for {
		start, end, ok := secretSpan(msg)
		if !ok {
			return truncateRunes(msg, maxEcho)
		}
		msg = msg[:start] + "***" + msg[end:]
	}
}

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

// isBase64Char reports whether c belongs to base64 or base64url.
func isBase64Char(c byte) bool {
	return isAlnum(c) || strings.IndexByte("-_+/=", c) >= 0
}

// redactViolations returns vs (never nil) with the inputs of secret members
// replaced by "***" and every echoed string, in loc, input or ctx (a
// json_invalid's error names a duplicate key), echoed as echoString does:
// "***" when it looks like a secret, else cut to maxEcho characters; msg as
// echoMsg has it. vs is not modified.
func redactViolations(vs []schema.Violation) []schema.Violation {
	out := make([]schema.Violation, len(vs))
	for i, v := range vs {
		loc := make([]any, len(v.Loc))
		secret := false
		for j, e := range v.Loc {
			if name, ok := e.(string); ok {
				secret = secretMembers[name]
				e = echoString(name)
			} else {
				secret = false
			}
			loc[j] = e
		}
		v.Loc = loc
		v.Msg = echoMsg(v.Msg)
		if v.Ctx != nil {
			v.Ctx = redactInput(v.Ctx).(map[string]any)
		}
		switch {
		case v.Input == nil:
		case secret:
			v.Input = "***"
		default:
			v.Input = redactInput(v.Input)
		}
		out[i] = v
	}
	return out
}

// redactInput is redactViolations for one echoed input and what it holds.
func redactInput(x any) any {
	switch x := x.(type) {
	case string:
		return echoString(x)
	case json.Number:
		if len(x) > maxEcho {
			return string(x[:maxEcho]) // a cut number is no longer one
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if secretMembers[k] {
				e = "***"
			} else {
				e = redactInput(e)
			}
			out[echoString(k)] = e
		}
		return out
	case []any:
		return mapItems(x, redactInput)
	}
	return x
}

// echoString is how a 422 echoes a string: "***" when it looks like a
// secret (looksSecret), else its first maxEcho characters.
func echoString(s string) string {
	if looksSecret(s) {
		return "***"
	}
	return truncateRunes(s, maxEcho)
}

// mapItems returns a new array of f applied to each item of x: the array
// step of the walks over decoded JSON values (redactInput, deepCopyValue).
func mapItems(x []any, f func(any) any) []any {
	out := make([]any, len(x))
	for i, e := range x {
		out[i] = f(e)
	}
	return out
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
	return jsonappend.Marshal(v) // "&" in a URL stays "&": humans copy these
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
