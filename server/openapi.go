package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coupond/coupond/api"
	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server/schema"
)

// The OpenAPI document served at GET /v1/openapi.json is generated from
// routes() (method, path, name, scope, public, limit class, body limit,
// quota), from the very schema.ObjectSchema values the handlers validate
// with (schema.JSONSchema), from the Go types the handlers answer with
// (reflection over their json tags) and from the error table of errors.go.
// What those cannot say (summaries, descriptions, examples, the errors a
// handler adds) is in opDocs below, keyed by route name.
//
// The generated document is committed as openapi.json and embedded by
// health.go. TestOpenAPIGolden fails when the committed file differs from
// what openAPIDocument generates; regenerate it with
//
//	go generate ./server/    (runs: go test -run '^TestOpenAPIGolden$' -update)
//
// TestOpenAPIMatchesRoutes checks the committed document against routes()
// on its own (every route, method, path, scope and public flag, and nothing
// else), so a route change that is not regenerated fails twice.

//go:generate go test -run ^TestOpenAPIGolden$ -update .

const (
	openAPIVersion = "3.1.0"
	apiVersion     = "1.0.0" // spec: Versioning
)

// obj is a JSON object of the document; encoding/json writes its keys
// sorted, so the output is deterministic.
type obj = map[string]any

func schemaRef(name string) obj    { return obj{"$ref": "#/components/schemas/" + name} }
func responseRef(name string) obj  { return obj{"$ref": "#/components/responses/" + name} }
func headerRef(name string) obj    { return obj{"$ref": "#/components/headers/" + name} }
func jsonContent(schema obj) obj   { return obj{"application/json": obj{"schema": schema}} }
func nullableSchema(s obj) obj     { return obj{"anyOf": []any{s, obj{"type": "null"}}} }
func withDesc(s obj, d string) obj { s["description"] = d; return s }

// openAPIPath turns an httprouter path (/v1/campanas/:campana_id) into an
// OpenAPI path template (/v1/campanas/{campana_id}).
func openAPIPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// pathParams returns the names of the parameters of an httprouter path.
func pathParams(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			out = append(out, s[1:])
		}
	}
	return out
}

// opDoc is what the document says about one route beyond routes().
type opDoc struct {
	tag, summary, description string
	pathParams                map[string]obj // schema and description by name
	params                    []any          // query and header parameters
	body                      obj            // requestBody
	status                    int            // success status; 0 means 200
	okDesc                    string
	okContent                 obj // nil: the default JSON body okSchema
	okSchema                  obj
	okHeaders                 obj
	otherResponses            obj    // extra responses that are not ErrorV1 (readyz's 503)
	errors                    []kind // errors the handler adds to those of the pipeline
	validates                 bool   // 422 beyond the JSON body (path, header, form)
	rateClass                 limitClass
	rateKey                   string // what the rate limit is counted per
	security                  []any  // public routes: the requirement, default []
	oauthErrors               bool   // a form request's error bodies add RFC 6749 error and error_description (token endpoint)
}

// kindDocs says when each error kind is answered (errorTable gives status,
// codigo and message).
var kindDocs = map[kind]string{
	kindUnauthenticated:     "Token missing, invalid or expired; credential revoked, suspended or unknown. Every cause gives the same answer. Header `WWW-Authenticate: Bearer` (`Basic` from the token endpoint when the client used HTTP Basic).",
	kindForbidden:           "The credential lacks the scope the route needs (see `x-scopes`).",
	kindNotFound:            "Unknown, altered, invented or foreign id; any resource of another tenant. Also every unknown path or method.",
	kindAlreadyConfirmed:    "The decision's execution was already confirmed.",
	kindExpired:             "Confirmation after `caduca_en`.",
	kindIdempotencyConflict: "Same `Idempotency-Key` with a different body (different content: bodies are compared as canonical JSON), while the first request with that key is still running, or a key a fallback record's `Replaces-Idempotency-Key` spent (`mensaje` says so: the request it named decides nothing more).",
	kindTooLarge:            "Body over the route's size limit (see `x-max-body-bytes`); `mensaje` names the limit in bytes.",
	kindNotJSON:             "Body declared with a Content-Type other than `application/json` or `*+json` (an absent Content-Type is taken as JSON), or sent with a `Content-Encoding` other than `identity` (`campo` `Content-Encoding`: send bodies uncompressed).",
	kindRateLimited:         "Rate limit (per credential, see `x-rate-limit`) or quota exceeded; `mensaje` says which limit (a rate limit names its rate and burst). Header `Retry-After` (integer seconds, at least 1).",
	kindPaused:              "The operator paused the tenant. Header `Retry-After`.",
	kindInternal:            "Internal error. The body carries `trace_id` and never internal details.",
	kindStorageFull:         "The data dir's file system is below its reserve of free space (`serve --disk-reserve`): writes are refused, reads, exports and deletions go on, and writes resume by themselves when space comes back. Header `Retry-After`.",
	kindBadRequest: "The request's HTTP framing is broken: a malformed chunked encoding, a body that ends before its `Content-Length`, a body that does not arrive within the server's read timeout (`serve --read-timeout`, default 30 s), or a request with both `Content-Length` and `Transfer-Encoding` (any route); the connection is closed after the answer. Header-level faults that net/http catches before coupond (a malformed request line or header, a missing `Host`, an unparsable `Content-Length`, an unsupported `Transfer-Encoding`, a header block over 32 KiB) get this same body, `esquema_invalido` with a `trace_id`, under net/http's status: 400, 501 or 431; `mensaje` names the fault. " +
		"On the token endpoint also: the client authenticated both with HTTP Basic and with credentials in the body (OAuth 2.0 `invalid_request`, RFC 6749 §2.3; `campo` is `Authorization`).",
}

// eventOnlyCodes are the codigos that appear only in rechazados of POST
// /v1/eventos (with esquema_invalido, which is also a status code's).
var eventOnlyCodes = []struct{ codigo, when string }{
	{"esquema_invalido", "the event breaks its tipo's schema; `campo` is the dotted path (`extra.margen`); also an event that is not an object, an unknown `tipo`, or a `decision_id` that is not a valid id of the tenant"},
	{"campo_desconocido", "the event has a member its tipo does not declare; `campo` names it"},
	{"ts_fuera_de_rango", fmt.Sprintf("`ts` more than %s after the tenant's clock or more than %d days before it", humanDuration(tsAhead), int(tsBehind/(24*time.Hour)))},
	{"duplicado", "an `event_id` already processed with different content (same content counts in `duplicados`), in an earlier request or earlier in the same one"},
}

func kindName(k kind) string {
	row := errorTable[k]
	return row.codigo + "_" + strconv.Itoa(row.status)
}

// allKinds is every kind of errorTable in a stable order.
func allKinds() []kind { return slices.Sorted(maps.Keys(errorTable)) }

// docGen builds the document; it collects components as it goes.
type docGen struct {
	schemas obj
	types   map[reflect.Type]string
	// fieldDocs and fieldPatches describe fields of reflected types,
	// keyed "Component.field".
	fieldDocs    map[string]string
	fieldPatches map[string]obj
	strict       map[string]bool // components that refuse unknown members
}

// openAPIDocument returns the OpenAPI document of the server, as served.
func openAPIDocument() ([]byte, error) {
	doc, err := buildOpenAPI((&Server{}).routes())
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// buildOpenAPI returns the document of routes. Every route must have an
// entry in opDocs, and every entry a route.
func buildOpenAPI(routes []route) (obj, error) {
	g := newDocGen()
	g.requestSchemas()
	for t := range g.types {
		g.typeSchema(t)
	}
	g.handSchemas()
	g.oauthSchemas()
	paths, err := g.paths(routes)
	if err != nil {
		return nil, err
	}
	doc := g.document(paths)
	numberFormats(doc)
	return doc, nil
}

// numberFormats gives every number schema of v without a format the
// format double, and every integer schema without one the format int64.
// Amounts are decimals of up to 10^9 with two places, and stock generators
// read a bare number as float32 (oapi-codegen does), which rounds
// 1234567.89 to 1234567.875 in an integrator's client. The server's
// integers are Go ints (64 bits), and Java and C# generators read a bare
// integer as a 32-bit int: a campaign's max_envios of 3000000000, which
// PUT accepts (the request schemas say int64), would not decode from GET.
func numberFormats(v any) {
	switch v := v.(type) {
	case obj:
		if _, has := v["format"]; !has {
			switch {
			case hasType(v["type"], "number"):
				v["format"] = "double"
			case hasType(v["type"], "integer"):
				v["format"] = "int64"
			}
		}
		for _, c := range v {
			numberFormats(c)
		}
	case []any:
		for _, c := range v {
			numberFormats(c)
		}
	}
}

// hasType says whether a schema's type member t is name or a list of types
// that has it.
func hasType(t any, name string) bool {
	switch t := t.(type) {
	case string:
		return t == name
	case []any:
		return slices.Contains(t, any(name))
	case []string:
		return slices.Contains(t, name)
	}
	return false
}

// newDocGen returns a generator that knows the Go types the handlers answer
// with and the component each becomes.
func newDocGen() *docGen {
	return &docGen{
		schemas: obj{},
		types: map[reflect.Type]string{
			reflect.TypeFor[engine.Decision]():                "Decision",
			reflect.TypeFor[engine.Detalle]():                 "Detalle",
			reflect.TypeFor[engine.DetalleAccion]():           "DetalleAccion",
			reflect.TypeFor[engine.Rejection]():               "Rechazo",
			reflect.TypeFor[api.RespuestaEventos]():           "RespuestaEventos",
			reflect.TypeFor[client.EstadoLote]():              "EstadoLote",
			reflect.TypeFor[client.CatalogoRespuesta]():       "CatalogoRespuesta",
			reflect.TypeFor[client.AccionCatalogoRespuesta](): "AccionCatalogoRespuesta",
			reflect.TypeFor[client.CampanaRespuesta]():        "CampanaRespuesta",
			reflect.TypeFor[client.ErrorV1]():                 "ErrorV1",
			reflect.TypeFor[client.ExportacionCliente]():      "ExportacionCliente",
			reflect.TypeFor[client.EventoExportado]():         "EventoExportado",
			reflect.TypeFor[client.DecisionExportada]():       "DecisionExportada",
			reflect.TypeFor[client.ConfirmacionExportada]():   "ConfirmacionExportada",
			reflect.TypeFor[client.VinculoCupon]():            "VinculoCupon",
			reflect.TypeFor[client.BorradoExportado]():        "BorradoExportado",
		},
		fieldDocs:    responseFieldDocs,
		fieldPatches: responseFieldPatches(),
		strict:       map[string]bool{"ErrorV1": true},
	}
}

// paths returns the Paths Object of routes: one operation per route, each
// described by its entry in opDocs.
func (g *docGen) paths(routes []route) (obj, error) {
	docs, err := opDocs()
	if err != nil {
		return nil, err
	}
	paths := obj{}
	seen := map[string]bool{}
	for _, rt := range routes {
		d, ok := docs[rt.name]
		if !ok {
			return nil, fmt.Errorf("openapi: route %s %s (%s) has no entry in opDocs", rt.method, rt.path, rt.name)
		}
		if seen[rt.name] {
			return nil, fmt.Errorf("openapi: route name %s used twice", rt.name)
		}
		seen[rt.name] = true
		p := openAPIPath(rt.path)
		item, _ := paths[p].(obj)
		if item == nil {
			item = obj{}
			paths[p] = item
		}
		m := strings.ToLower(rt.method)
		if item[m] != nil {
			return nil, fmt.Errorf("openapi: %s %s twice", rt.method, rt.path)
		}
		op, err := g.operation(rt, d)
		if err != nil {
			return nil, err
		}
		item[m] = op
	}
	for name := range docs {
		if !seen[name] {
			return nil, fmt.Errorf("openapi: opDocs has %q, which is no route", name)
		}
	}
	return paths, nil
}

// document returns the whole document around paths, with the components
// g collected.
func (g *docGen) document(paths obj) obj {
	return obj{
		"openapi":           openAPIVersion,
		"jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
		"info": obj{
			"title":       "coupond data API",
			"version":     apiVersion,
			"summary":     "Coupon decision engine: events in, decisions out, learning from confirmed executions.",
			"description": infoDescription(),
			"license":     obj{"name": "Apache-2.0", "identifier": "Apache-2.0"},
		},
		"servers": []any{obj{"url": "/", "description": "The server's --base-url (default http://127.0.0.1:8080)."}},
		"tags":    openAPITags(),
		"paths":   paths,
		"webhooks": obj{
			batch.EventLoteCompletado: obj{"post": webhookOperation()},
		},
		"components": obj{
			"schemas":         g.schemas,
			"responses":       usedResponses(paths),
			"headers":         openAPIHeaders(),
			"securitySchemes": securitySchemes(),
		},
		"x-error-codes":             errorCodes(),
		"x-validation-error-types":  validationErrorTypes(),
		"x-customer-features":       customerFeatures(),
		"x-segment-grammar":         segmentGrammar,
		"x-result-retention":        obj{"duration": isoDuration(batch.ResultRetention), "seconds": int(batch.ResultRetention.Seconds())},
		"x-signed-result-url":       signedURLDoc(),
		"x-rate-limits":             rateLimitsDoc(),
		"x-idempotency":             idempotencyDoc(),
		"x-webhook-signature":       webhookSignatureDoc(),
		"x-decision-confirm-window": isoDuration(engine.DecisionTTL),
	}
}

// operation builds the Operation Object of rt.
func (g *docGen) operation(rt route, d opDoc) (obj, error) {
	op := obj{
		"operationId": rt.name,
		"summary":     d.summary,
		"tags":        []any{d.tag},
	}
	if d.description != "" {
		op["description"] = d.description
	}
	params, err := operationParams(rt, d)
	if err != nil {
		return nil, err
	}
	if params != nil {
		op["parameters"] = params
	}
	if d.body != nil {
		op["requestBody"] = d.body
	} else if rt.maxBody > 0 {
		return nil, fmt.Errorf("openapi: route %s reads a body but documents none", rt.name)
	}
	operationSecurity(op, rt, d)
	operationLimits(op, rt, d)
	responses, err := operationResponses(rt, d)
	if err != nil {
		return nil, err
	}
	op["responses"] = responses
	return op, nil
}

// operationParams returns the parameters of rt: its path parameters, each
// of which d must document, then d's other parameters.
func operationParams(rt route, d opDoc) ([]any, error) {
	var params []any
	for _, name := range pathParams(rt.path) {
		s, ok := d.pathParams[name]
		if !ok {
			return nil, fmt.Errorf("openapi: route %s: path parameter %s undocumented", rt.name, name)
		}
		p := obj{"name": name, "in": "path", "required": true}
		for k, v := range s {
			p[k] = v
		}
		params = append(params, p)
	}
	if len(d.pathParams) != len(pathParams(rt.path)) {
		return nil, fmt.Errorf("openapi: route %s documents path parameters it does not have", rt.name)
	}
	return append(params, d.params...), nil
}

// operationSecurity sets the security requirement and x-scopes of op.
func operationSecurity(op obj, rt route, d opDoc) {
	if rt.public {
		if d.security != nil {
			op["security"] = d.security
		} else {
			op["security"] = []any{}
		}
		op["x-scopes"] = []any{}
		return
	}
	scopes := []any{}
	if rt.scope != 0 {
		scopes = append(scopes, rt.scope.String())
	}
	// One scheme, oauth2: OpenAPI defines scopes for OAuth schemes
	// (Spectral flags them on an http bearer scheme), and a bearer
	// scheme beside it would describe the same header twice.
	op["security"] = []any{obj{"oauth2": scopes}}
	op["x-scopes"] = scopes
}

// operationLimits sets the body limit, rate limit and quota of op.
func operationLimits(op obj, rt route, d opDoc) {
	if rt.maxBody > 0 {
		op["x-max-body-bytes"] = rt.maxBody
	}
	class, key := rt.class, "credential"
	if d.rateClass != classNone {
		class, key = d.rateClass, d.rateKey
	}
	if class != classNone {
		r := classRates[class]
		op["x-rate-limit"] = obj{"per_second": r.perSecond, "burst": r.burst, "per": key}
	}
	if rt.quota != "" {
		op["x-quota"] = quotaDocs[rt.quota]
	}
}

// operationResponses returns the Responses Object of rt: its success
// answer, d's other answers, then one answer per error status it can give.
func operationResponses(rt route, d opDoc) (obj, error) {
	status := d.status
	if status == 0 {
		status = http.StatusOK
	}
	ok := obj{"description": d.okDesc}
	hdrs := obj{"X-Trace-Id": headerRef("X-Trace-Id")}
	for k, v := range d.okHeaders {
		hdrs[k] = v
	}
	ok["headers"] = hdrs
	switch {
	case d.okContent != nil:
		ok["content"] = d.okContent
	case d.okSchema != nil:
		ok["content"] = jsonContent(d.okSchema)
	}
	responses := obj{strconv.Itoa(status): ok}
	for code, r := range d.otherResponses {
		responses[code] = r
	}
	for st, ks := range errorKindsByStatus(rt, d) {
		code := strconv.Itoa(st)
		if responses[code] != nil {
			return nil, fmt.Errorf("openapi: route %s: status %s documented twice", rt.name, code)
		}
		if len(ks) == 1 {
			responses[code] = responseRef(kindName(ks[0]))
			continue
		}
		slices.Sort(ks)
		responses[code] = errorResponse(ks)
	}
	if d.validates || rt.maxBody > 0 {
		responses["422"] = responseRef("validacion_422")
	}
	if d.oauthErrors {
		for code, r := range responses {
			if oe, ok := oauthErrorsByStatus[code]; ok {
				responses[code] = oauthResponse(asObjDoc(r), oe)
			}
			if code != strconv.Itoa(status) {
				responses[code] = noStoreResponse(asObjDoc(responses[code]))
			}
		}
	}
	return responses, nil
}

// noStoreResponse is r (a response or a reference to one of
// errorResponses) with the headers the token endpoint sets before it looks
// at the request (issueToken), so its error answers carry them too, as RFC
// 6749 5.2 shows: Cache-Control no-store and Pragma no-cache. An answer
// refused before the handler (400 for broken framing) has neither, so they
// are not required.
func noStoreResponse(r obj) obj {
	if ref, ok := r["$ref"].(string); ok {
		r = asObjDoc(errorResponses()[strings.TrimPrefix(ref, "#/components/responses/")])
	}
	r = deepCopy(r)
	h := asObjDoc(r["headers"])
	if h == nil {
		h = obj{}
		r["headers"] = h
	}
	for k, v := range noStoreHeaders() {
		h[k] = v
	}
	return r
}

// noStoreHeaders are the token endpoint's Cache-Control and Pragma.
func noStoreHeaders() obj {
	return obj{
		"Cache-Control": obj{"schema": obj{"type": "string", "const": "no-store"}},
		"Pragma":        obj{"schema": obj{"type": "string", "const": "no-cache"}},
	}
}

// errorKindsByStatus returns the error kinds rt can answer with, grouped
// by HTTP status: those of the pipeline its route row implies, then d's.
func errorKindsByStatus(rt route, d opDoc) map[int][]kind {
	kinds := []kind{kindInternal, kindBadRequest} // 400: any request can carry Content-Length with Transfer-Encoding
	if !rt.public {
		kinds = append(kinds, kindUnauthenticated, kindPaused)
		if refusesWrites(rt) {
			kinds = append(kinds, kindStorageFull)
		}
		if rt.scope != 0 {
			kinds = append(kinds, kindForbidden)
		}
		if rt.class != classNone || rt.quota != "" {
			kinds = append(kinds, kindRateLimited)
		}
	}
	if rt.maxBody > 0 {
		kinds = append(kinds, kindTooLarge, kindNotJSON)
	}
	kinds = append(kinds, d.errors...)
	byStatus := map[int][]kind{}
	for _, k := range kinds {
		st := errorTable[k].status
		if !slices.Contains(byStatus[st], k) {
			byStatus[st] = append(byStatus[st], k)
		}
	}
	return byStatus
}

// oauthErrorsByStatus are the RFC 6749 error codes the token endpoint adds
// per status (withOAuthError in token.go).
var oauthErrorsByStatus = map[string][]oauthError{
	"400": {oauthInvalidRequest},
	"401": {oauthInvalidClient},
	"403": {oauthInvalidScope},
	"413": {oauthInvalidRequest},
	"415": {oauthInvalidRequest},
	"422": {oauthInvalidRequest, oauthUnsupportedType},
}

func asObjDoc(v any) obj { m, _ := v.(obj); return m }

// oauthResponse is r (a response or a reference to one of errorResponses)
// with the token endpoint's body: ErrorToken or HTTPValidationErrorToken,
// examples with the OAuth fields.
func oauthResponse(r obj, codes []oauthError) obj {
	if ref, ok := r["$ref"].(string); ok {
		r = asObjDoc(errorResponses()[strings.TrimPrefix(ref, "#/components/responses/")])
	}
	r = deepCopy(r)
	mt := asObjDoc(asObjDoc(r["content"])["application/json"])
	switch asObjDoc(mt["schema"])["$ref"] {
	case "#/components/schemas/ErrorV1":
		mt["schema"] = schemaRef("ErrorToken")
	case "#/components/schemas/HTTPValidationError":
		mt["schema"] = schemaRef("HTTPValidationErrorToken")
		// The token request's own fields, as a form with grant_type only
		// is answered; the shared example is a decision request's.
		mt["example"] = obj{"detail": []any{
			obj{"loc": []any{"body", "client_id"}, "msg": "Field required", "type": "missing"},
			obj{"loc": []any{"body", "client_secret"}, "msg": "Field required", "type": "missing"},
		}}
	}
	add := func(ex any) {
		if m := asObjDoc(ex); m != nil {
			m["error"], m["error_description"] = codes[0].code, codes[0].description
			if d, ok := exampleDescription(m["detail"]); ok && codes[0].code == oauthInvalidRequest.code {
				m["error_description"] = d // as withOAuthError describes a 422's violations
			}
		}
	}
	add(mt["example"])
	for _, ex := range asObjDoc(mt["examples"]) {
		add(asObjDoc(ex)["value"])
	}
	var names []string
	for _, c := range codes {
		names = append(names, "`"+c.code+"`")
	}
	r["description"] = fmt.Sprint(r["description"], "\n\nOAuth 2.0 (RFC 6749 5.2): when the request is the OAuth 2.0 form (`application/x-www-form-urlencoded`), the body adds `error` (", strings.Join(names, " or "), ") and `error_description`; a JSON request's body has neither.")
	return r
}

// exampleDescription is the error_description the token endpoint sends
// with a 422 whose detail is the example's detail (violationsDescription);
// ok is false when detail is not a list of violations.
func exampleDescription(detail any) (string, bool) {
	if detail == nil {
		return "", false
	}
	data, err := json.Marshal(detail)
	var v []schema.Violation
	if err != nil || json.Unmarshal(data, &v) != nil || len(v) == 0 {
		return "", false
	}
	return violationsDescription(v), true
}

// deepCopy copies a document subtree of obj, []any and scalars.
func deepCopy(m obj) obj {
	out := obj{}
	for k, v := range m {
		out[k] = deepCopyValue(v)
	}
	return out
}

func deepCopyValue(v any) any {
	switch v := v.(type) {
	case obj:
		return deepCopy(v)
	case []any:
		return mapItems(v, deepCopyValue)
	}
	return v
}

// oauthSchemas adds ErrorToken and HTTPValidationErrorToken: ErrorV1 and
// HTTPValidationError with the RFC 6749 members the token endpoint adds to
// a form request's errors (optional: a JSON request's errors lack them).
func (g *docGen) oauthSchemas() {
	add := func(name, base string, codes ...oauthError) {
		m := deepCopy(g.schemas[base].(obj))
		var enum []any
		for _, c := range codes {
			enum = append(enum, c.code)
		}
		props := m["properties"].(obj)
		props["error"] = obj{"type": "string", "enum": enum, "description": "OAuth 2.0 error code (RFC 6749 5.2), for stock OAuth clients."}
		props["error_description"] = obj{"type": "string", "description": "Human-readable ASCII text of the error."}
		m["description"] = fmt.Sprint("`", base, "` of the token endpoint. A request in the OAuth 2.0 form (`application/x-www-form-urlencoded`, what stock OAuth clients send) gets the OAuth 2.0 members `error` and `error_description` too; any other request gets `", base, "` exactly, without them.")
		g.schemas[name] = m
	}
	add("ErrorToken", "ErrorV1", oauthInvalidClient, oauthInvalidScope, oauthInvalidRequest)
	add("HTTPValidationErrorToken", "HTTPValidationError", oauthInvalidRequest, oauthUnsupportedType)
}

// errorResponse is the response of one status that can carry any of ks.
func errorResponse(ks []kind) obj {
	var desc []string
	var codigos []any
	hdr := obj{"X-Trace-Id": headerRef("X-Trace-Id")}
	var examples = obj{}
	for _, k := range ks {
		row := errorTable[k]
		desc = append(desc, "`"+row.codigo+"`: "+kindDocs[k])
		if !slices.Contains(codigos, any(row.codigo)) {
			codigos = append(codigos, row.codigo)
		}
		examples[row.codigo] = obj{"value": errorExample(k)}
		switch k {
		case kindUnauthenticated:
			hdr["WWW-Authenticate"] = headerRef("WWW-Authenticate")
		case kindRateLimited, kindPaused, kindStorageFull:
			hdr["Retry-After"] = headerRef("Retry-After")
		}
	}
	return obj{
		"description": strings.Join(desc, "\n\n"),
		"headers":     hdr,
		"content":     obj{"application/json": obj{"schema": schemaRef("ErrorV1"), "examples": examples}},
		"x-codigos":   codigos,
	}
}

func errorExample(k kind) obj {
	row := errorTable[k]
	return obj{"codigo": row.codigo, "mensaje": row.msg, "campo": nil, "detalle": nil, "trace_id": "9f3c2a71d04be815"}
}

// errorResponses are the components/responses: one per error kind and the
// 422.
func errorResponses() obj {
	out := obj{}
	for _, k := range allKinds() {
		out[kindName(k)] = errorResponse([]kind{k})
	}
	out["validacion_422"] = obj{
		"description": "Validation failed (HTTPValidationError): every violation found is listed, not only the first, up to " + strconv.Itoa(schema.MaxViolations) +
			" per part of the request; past that, one last `value_error` at the part's root (`loc` `[\"body\"]`) counts them (`ctx` `max_errors`, `errors`). " +
			"`loc` starts with `body`, `path`, `query` or `header`; `type` uses pydantic v2's vocabulary (see `x-validation-error-types`).",
		"headers": obj{"X-Trace-Id": headerRef("X-Trace-Id")},
		"content": obj{"application/json": obj{"schema": schemaRef("HTTPValidationError"), "example": obj{"detail": []any{
			obj{"loc": []any{"body", "contexto", "canal"}, "msg": "Field required", "type": "missing"},
			obj{"loc": []any{"body", "cliente_ref"}, "msg": "String should have at least 8 characters", "type": "string_too_short", "ctx": obj{"min_length": 8}, "input": "abc"},
		}}}},
		"x-codigos": []any{},
	}
	return out
}

func openAPIHeaders() obj {
	return obj{
		"X-Trace-Id": obj{
			"description": "Trace id of the request, on every response; error bodies carry the same value in `trace_id`. Quote it to support.",
			"schema":      obj{"type": "string"},
		},
		"Retry-After": obj{
			"description": "Integer seconds to wait before retrying, at least 1. Then retry with exponential backoff.",
			"required":    true,
			"schema":      obj{"type": "integer", "minimum": 1},
		},
		"WWW-Authenticate": obj{
			"description": "`Bearer`; from the token endpoint `Basic` when the client authenticated with HTTP Basic.",
			"required":    true,
			"schema":      obj{"type": "string"},
		},
	}
}

// usedResponses is errorResponses without those no operation refers to
// (an error kind that is only ever answered beside another of its status).
func usedResponses(paths obj) obj {
	used := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case obj:
			if r, ok := v["$ref"].(string); ok {
				used[strings.TrimPrefix(r, "#/components/responses/")] = true
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(paths)
	out := obj{}
	for name, r := range errorResponses() {
		if used[name] {
			out[name] = r
		}
	}
	return out
}

func securitySchemes() obj {
	scopes := obj{}
	for _, s := range scopeNames {
		scopes[s.name] = scopeDocs[s.name]
	}
	return obj{
		"oauth2": obj{
			"type": "oauth2",
			"description": fmt.Sprintf("`Authorization: Bearer <access_token>`, a token from `POST /v1/token` (OAuth 2.0 client credentials) that lives %s. "+
				"One Authorization header per request: two are 401 `no_autenticado`, whichever is good. "+
				"The requirement's list names the scope the route needs.", humanDuration(tokenTTL)),
			"flows": obj{"clientCredentials": obj{
				"tokenUrl": "/v1/token",
				"scopes":   scopes,
			}},
		},
		"webhookSignature": obj{
			"type": "apiKey",
			"in":   "header",
			"name": "webhook-signature",
			"description": "Webhook deliveries only (coupond is the client): the receiver authenticates each delivery by its Standard Webhooks signature, " +
				"HMAC-SHA256 with the registration's `secreto` over `<webhook-id>.<webhook-timestamp>.<raw body>` (see `x-webhook-signature`).",
		},
		"clientBasic": obj{
			"type":   "http",
			"scheme": "basic",
			"description": "Token endpoint only, form body: the client authenticated by HTTP Basic (client_id:client_secret, each form-urlencoded first, RFC 6749 2.3.1). " +
				"A Basic header that cannot be read (not base64, no colon), or more than one Authorization header, is 401 `no_autenticado` with either body form (with `invalid_client` for the form).",
		},
	}
}

var scopeDocs = map[string]string{
	"eventos:publicar":     "POST /v1/eventos",
	"decisiones:pedir":     "POST /v1/decisiones, POST /v1/lotes-decision, GET /v1/lotes-decision/{job_id}, GET /v1/lotes-decision/{job_id}/resultado",
	"decisiones:confirmar": "POST /v1/decisiones/{decision_id}/ejecucion, POST /v1/decisiones/respaldo",
	"campanas:escribir":    "PUT and GET /v1/campanas/{campana_id}",
	"catalogo:escribir":    "PUT and GET /v1/catalogo-acciones",
	"clientes:borrar":      "DELETE /v1/clientes/{cliente_ref}",
	"clientes:exportar":    "GET /v1/clientes/{cliente_ref}/exportacion",
	"webhooks:escribir":    "PUT and DELETE /v1/webhooks",
	"explicar:leer":        "adds `detalle` to every decision",
}

var quotaDocs = map[string]obj{
	quotaDecisions: {"name": quotaDecisions, "description": "Tenant daily quota of decisions (operator setting), per UTC day of the tenant clock; 429 with Retry-After up to the next UTC midnight. Also 3 decision requests per cliente_ref per day (batch lines take none of them). Idempotent replays (same Idempotency-Key and body) count toward neither and are answered with the stored decision when either is used up."},
	quotaEvents:    {"name": quotaEvents, "description": "Tenant daily quota of accepted events (operator setting), per UTC day of the tenant clock; 429 with Retry-After up to the next UTC midnight. Duplicates and rejected events do not count; a request whose new events do not all fit in what is left of the day is refused whole (nothing applied), so the quota is never passed. Past the quota, a request that only resends events accepted before (every one a duplicate) is still answered."},
	quotaBatch:     {"name": quotaBatch, "description": "One batch job in progress per tenant and at most one created per hour of the tenant clock (failed jobs do not count); checked before the body is read; 429 with Retry-After until that hour is over (at least 60 while a job is in progress: one that completes still holds its hour) and `detalle` `{\"job_id\": …}` naming the job that holds it (the one a creation whose 202 was lost made). A repeat of a creation with the same Idempotency-Key and body does not count and is answered with the first job when the limit is used up. A tenant's creation requests are also read one at a time: one sent while another is still being read and checked is 429 with Retry-After 1, before its body is read."},
}

func openAPITags() []any {
	return []any{
		obj{"name": "autenticacion", "description": "OAuth 2.0 client credentials."},
		obj{"name": "catalogo", "description": "The tenant's action catalog (the menu of coupons)."},
		obj{"name": "campanas", "description": "Campaigns: channel and budget applied before randomizing."},
		obj{"name": "eventos", "description": "Events published by the caller."},
		obj{"name": "decisiones", "description": "Online decisions, execution confirmations and fallback records."},
		obj{"name": "lotes", "description": "Batch decision jobs for a campaign."},
		obj{"name": "clientes", "description": "Customer data rights: export and deletion."},
		obj{"name": "webhooks", "description": "Webhook registration (notifications: see `webhooks`)."},
		obj{"name": "operacion", "description": "Outside /v1/ and without auth: health, readiness, metrics, this document."},
	}
}

// humanDuration spells d in days or minutes.
func humanDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + " days"
	}
	return strconv.Itoa(int(d/time.Minute)) + " minutes"
}

func isoDuration(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return "P" + strconv.Itoa(int(d/(24*time.Hour))) + "D"
	}
	return "PT" + strconv.Itoa(int(d.Seconds())) + "S"
}

// ---- schemas ----

// requestSchemas adds the request bodies, each generated from the schema
// its handler validates with.
func (g *docGen) requestSchemas() {
	put := func(name, desc string, s *schema.ObjectSchema) obj {
		m := schema.JSONSchema(s)
		if desc != "" {
			m["description"] = desc
		}
		g.schemas[name] = m
		return m
	}
	tok := put("PeticionToken", "Client-credentials token request (JSON).", tokenSchema)
	schemaProps(tok)["scope"] = withDesc(schemaProps(tok)["scope"].(obj), "Optional, space-separated: the token gets only these scopes; one the credential lacks gives 403 `sin_permiso`. Absent or blank: all the credential's scopes.")
	form := schema.JSONSchema(tokenSchema)
	form["required"] = []any{"grant_type"}
	delete(form, "additionalProperties") // other form fields are ignored
	form["description"] = "The standard OAuth 2.0 form (RFC 6749 4.4). `client_id` and `client_secret` are required unless the client authenticates with HTTP Basic, which wins when both are given."
	g.schemas["PeticionTokenForm"] = form

	put("Catalogo", "The whole action catalog; PUT replaces it. `id` >= 1 and unique (0 is reserved for \"nothing\"); `tipo_cupon` is what `CUPON_RECIBIDO.clave` carries. "+
		"`descuento_max_mxn` absent is 0 (no cap known); `canales` absent or empty means every channel (to offer an action on no channel, set `activa` false); `activa` absent is true. "+
		"`categorias` (optional, 1 to 64): the `COMPRA_CAT` `clave` values the coupon applies to (absent: the whole basket); a hint for learning which customers the coupon suits, never required. "+
		"A new action starts without support and is explored until it has some.", catalogSchema)
	put("Campana", "Campaign definition. `max_descuento_mxn` and `max_envios` absent or null: no cap (the answer shows a missing cap as null, so a campaign read back can be sent again with its caps as they came). Sends (`accion` != 0) are counted against the budget first come, first served; "+
		"each send reserves the action's `descuento_max_mxn` against `max_descuento_mxn`, and a percentage coupon without `descuento_max_mxn` (no bound) is never sent under a campaign with `max_descuento_mxn`. A `rechazada` confirmation, or `caduca_en` passing unconfirmed, gives the send back.", campaignSchema)
	dec := put("PeticionDecision", "Online decision request.", decisionSchema)
	ctx := schemaProps(dec)["contexto"].(obj)
	schemaProps(ctx)["acciones_permitidas"] = withDesc(schemaProps(ctx)["acciones_permitidas"].(obj), "Action ids executable now; the answer is one of them or 0 (0 is always allowed). Absent or null: every action of the catalog; an empty list: only 0.")
	schemaProps(ctx)["campana_id"] = withDesc(schemaProps(ctx)["campana_id"].(obj), "If a campaign with this id was defined, its budget applies. Absent or null: no campaign.")
	put("PeticionEjecucion", "Execution confirmation. `accion_real` only with `ejecutada` true (equal to the decided action: `ejecutada`; different: `modificada`); "+
		"`motivo_rechazo` only with `ejecutada` false (`rechazada`). Breaking either rule is a value_error.", confirmSchema)
	put("PeticionRespaldo", "Fallback record: the caller applied its own rule because the engine did not answer or was paused; stored with propensity 1. "+
		"`accion` must be 0, an action of the catalog or a coupon an earlier catalog held (the last 1,000 to leave it are remembered: the caller's rule may have sent it before the catalog changed, the record queued meanwhile); else 422 at `body.accion`.", fallbackSchema)
	lote := put("PeticionLoteDecisionV1", "Batch request. Exactly one of `clientes` or `segmento` (else a value_error at `body`). The campaign must be defined (else a value_error at `body.campana_id`); its `canal` is the channel and its budget applies before any randomization.", batchSchema)
	schemaProps(lote)["segmento"] = withDesc(nullableSchema(schemaRef("Segmento")), "Filter over customer features; see Segmento.")
	put("PeticionWebhook", "Webhook registration; replaces the tenant's webhook. Destinations in loopback, private, link-local or metadata ranges, given as addresses (also in the short forms `127.1`, `0x7f000001`, `2130706433`) or as names that resolve to them, are refused (422 `url_parsing` at `body.url`) unless the server runs with `--webhook-allow-private`. A name that does not resolve yet is accepted: every delivery attempt checks the destination again. A URL with user information (`https://user:pass@host`) is refused too (422 `url_parsing` at `body.url`, the password masked in `input`): the signature authenticates each delivery.", webhookSchema)

	// Events: the envelope, and one schema per tipo; an item that is not
	// one of them is a per-event rejection, never a 422.
	env := put("PeticionEventos", fmt.Sprintf("1 to 1000 events, at most %d bytes. Each event is checked on its own: one that breaks its tipo's schema is reported in `rechazados` (its position, `campo` and reason) and the rest are processed. Idempotent by `event_id`.", eventsBody), eventsEnvelope)
	mapping := obj{}
	var variants []any
	for _, tipo := range eventTypeNames() {
		name := "Evento_" + tipo
		m := schema.JSONSchema(eventByTipo[tipo])
		schemaProps(m)["tipo"] = obj{"type": "string", "const": tipo}
		m["title"] = tipo
		m["description"] = eventDocs[tipo]
		g.schemas[name] = m
		mapping[tipo] = "#/components/schemas/" + name
		variants = append(variants, schemaRef(name))
	}
	g.schemas["Evento"] = obj{
		"description":   "One event: the common members and an `extra` specific to its `tipo`.",
		"oneOf":         variants,
		"discriminator": obj{"propertyName": "tipo", "mapping": mapping},
	}
	ev := schemaProps(env)["eventos"].(obj)
	ev["items"] = schemaRef("Evento")
}

// props returns the properties of a JSON Schema object.
func schemaProps(m obj) obj { return m["properties"].(obj) }

var eventDocs = map[string]string{
	string(engine.CompraCat):     "Purchases of a ticket aggregated per category (a ticket with two categories is two events). `clave` is the category; `valor` the amount of its lines without VAT; `extra.margen` their margin (amount minus cost, net of discounts applied).",
	string(engine.CuponRecibido): "A coupon was issued. `clave` is the coupon type (`tipo_cupon` of the catalog); `valor` the maximum discount (0 if a percentage). Carries the `decision_id` when the engine decided the coupon: without it a redemption is not attributed.",
	string(engine.CuponRedimido): "A coupon was redeemed; `valor` is the discount applied in the ticket.",
	string(engine.CuponCaducado): "A coupon expired unredeemed; `valor` only 0.",
	string(engine.Baja):          "Opt-out. `clave` `comunicaciones` stops sends (on `extra.canal`, or on all channels without it) and penalizes the reward; `cuenta` closes the history (later purchases and coupons are ignored until an ALTA).",
	string(engine.Alta):          "Sign-up; `clave` is the sign-up channel.",
}

// typeSchema returns the schema of a Go type the handlers answer with; a
// registered struct becomes a component and is referred to.
func (g *docGen) typeSchema(t reflect.Type) obj {
	if name, ok := g.types[t]; ok {
		if _, done := g.schemas[name]; !done {
			g.schemas[name] = obj{} // placeholder against recursion
			g.schemas[name] = g.structSchema(name, t)
		}
		return schemaRef(name)
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return obj{"type": "string", "format": "date-time", "description": "UTC, suffix Z."}
	case t.Kind() == reflect.Pointer:
		return g.typeSchema(t.Elem())
	case t.Kind() == reflect.Struct:
		return g.structSchema("", t)
	case t.Kind() == reflect.Slice:
		return obj{"type": "array", "items": g.typeSchema(t.Elem())}
	case t.Kind() == reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return obj{"type": "object"}
		}
		return obj{"type": "object", "additionalProperties": g.typeSchema(t.Elem())}
	case t.Kind() == reflect.String:
		return obj{"type": "string"}
	case t.Kind() == reflect.Bool:
		return obj{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return obj{"type": "integer"}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return obj{"type": "number"}
	}
	return obj{}
}

// structSchema is the object schema of a struct from its json tags: a
// member without omitempty is always present (required); a pointer or map
// without omitempty may be null.
func (g *docGen) structSchema(name string, t reflect.Type) obj {
	ps := obj{}
	req := []any{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		field, opts, _ := strings.Cut(tag, ",")
		if field == "" {
			field = f.Name
		}
		omit := strings.Contains(opts, "omitempty")
		s := g.typeSchema(f.Type)
		if !omit {
			req = append(req, field)
			if k := f.Type.Kind(); k == reflect.Pointer || k == reflect.Map {
				if typ, ok := s["type"].(string); ok {
					s["type"] = []any{typ, "null"}
				} else {
					s = nullableSchema(s)
				}
			}
		}
		key := name + "." + field
		for k, v := range g.fieldPatches[key] {
			s[k] = v
		}
		if d := g.fieldDocs[key]; d != "" {
			if _, isRef := s["$ref"]; isRef {
				s = obj{"allOf": []any{s}, "description": d}
			} else {
				s["description"] = d
			}
		}
		ps[field] = s
	}
	m := obj{"type": "object", "properties": ps, "required": req}
	if g.strict[name] {
		m["additionalProperties"] = false
	}
	if d := g.fieldDocs[name]; d != "" {
		m["description"] = d
	}
	return m
}

var responseFieldDocs = map[string]string{
	"Decision":                                 "A decision (response of POST /v1/decisiones; with `cliente_ref`, one line of a batch result).",
	"Decision.decision_id":                     "Identifier of the decision, signed and bound to the tenant (`d<tenant>.<nonce>.<mac>`, ID pattern, at most 128 characters). Label the CUPON_RECIBIDO event with it and confirm it.",
	"Decision.accion":                          "0: send nothing; otherwise an id of the tenant's action catalog.",
	"Decision.accion_nombre":                   "Name of the action.",
	"Decision.propension":                      "Probability with which the engine chose the action (after any budget cut); 1 for control group, open reward window and forced 0.",
	"Decision.politica_version":                "Label of the policy that produced the decision (`v<rewards>-<tenant time>`).",
	"Decision.explorado":                       "True when the drawn action differs from the action the policy ranks first.",
	"Decision.en_control":                      "True when the customer is in the control group (`accion` 0, `propension` 1; with control kind `regla_actual` the caller applies its own rule and confirms it with `accion_real`).",
	"Decision.en_respaldo":                     "True when the record is a fallback record.",
	"Decision.caduca_en":                       "Deadline of the execution confirmation: 7 days after the decision (UTC).",
	"Decision.motivo":                          "Short explanation (e.g. open reward window, spent budget, control group).",
	"Decision.detalle":                         "Only for credentials with scope `explicar:leer`; on every decision.",
	"Decision.en_sombra":                       "Present, with value true, only while the tenant is in shadow mode: the engine only suggests, the caller applies its own rule and confirms what it did with `accion_real`.",
	"Detalle":                                  "Why the engine chose: every eligible action (0 included) with its expected value and probability.",
	"Detalle.acciones":                         "One row per eligible action, 0 included.",
	"DetalleAccion.accion":                     "Action id (0: nothing).",
	"DetalleAccion.mu_mxn":                     "μ: expected reward in MXN over the reward window (margin of purchases minus sending cost minus opt-out penalty).",
	"DetalleAccion.sigma_mxn":                  "Standard error of the action's effect against sending nothing (its μ minus action 0's μ), in MXN; 0 for action 0.",
	"DetalleAccion.probabilidad":               "Probability of drawing this action.",
	"RespuestaEventos":                         "`aceptados` + `duplicados` + the number of `rechazados` is the number of events sent.",
	"RespuestaEventos.aceptados":               "Events stored now.",
	"RespuestaEventos.duplicados":              "Events whose `event_id` was already processed with the same content (canonical JSON: key order, number spelling, a null member instead of an absent one, `valor` 0 instead of absent where absent is 0 (`CUPON_RECIBIDO`, `CUPON_CADUCADO`, `BAJA`, `ALTA`) and the offset of `ts` and `extra.caducidad` do not matter).",
	"RespuestaEventos.rechazados":              "Rejected events, ordered by `indice`.",
	"Rechazo.indice":                           "Position of the event in `eventos` (0-based).",
	"Rechazo.event_id":                         "The event's `event_id` as sent (cut to 256 characters); null when absent or not a string.",
	"Rechazo.codigo":                           "Why (see `x-error-codes`).",
	"Rechazo.campo":                            "Dotted path of the failing member within the event (`extra.margen`); null when the event as a whole fails.",
	"Rechazo.mensaje":                          "Explanation, at most 512 characters.",
	"EstadoLote":                               "A batch job's state.",
	"EstadoLote.total":                         "Customers the job covers (known once it runs). A customer erased since keeps counting here, as in `procesados`, `envios` and the webhook's `lineas`: the counts of the job as it ran.",
	"EstadoLote.procesados":                    "Decisions written so far (the result file's lines when completed; a customer erased since has left the file, one line fewer).",
	"EstadoLote.resultado_url":                 "Only when completed and the result is kept (7 days after completion): a signed URL valid 60 minutes that downloads the result without a token, while the credential that asked for it stays active (x-signed-result-url). It is a secret. A new status query gives a new URL.",
	"EstadoLote.resultado_expira_en":           "Expiry of `resultado_url`.",
	"EstadoLote.error":                         "Only when `fallido`: why.",
	"CatalogoRespuesta":                        "The catalog as stored, with its version (0 before any PUT).",
	"CatalogoRespuesta.version":                "Increases on every PUT.",
	"CampanaRespuesta":                         "The stored campaign.",
	"CampanaRespuesta.max_descuento_mxn":       "null: no cap.",
	"CampanaRespuesta.max_envios":              "null: no cap.",
	"ExportacionCliente":                       "Everything held about a customer. An unknown customer has empty collections; after a completed deletion only `borrado` remains.",
	"ExportacionCliente.caracteristicas":       "Derived features at the tenant clock (names as in `x-customer-features`), plus sign-up channel, declared segment and profile.",
	"ExportacionCliente.borrado":               "The deletion record, if a deletion was requested.",
	"ExportacionCliente.en_cuarentena":         "Records held about the customer that could not be read back (damaged, e.g. written by an older release): kept in quarantine, never exported, erased by the customer's deletion. Normally 0.",
	"DecisionExportada.recompensa_mxn":         "Final reward, once the reward window and its grace have passed.",
	"DecisionExportada.en_sombra":              "True when the decision was made in shadow mode: a suggestion; the caller applied its own rule and confirmed what it did.",
	"DecisionExportada.estado_ejecucion":       "`pendiente` while the decision is not confirmed (and for good once its confirmation deadline, `caduca_en`, has passed: later confirmations are 409 `decision_caducada`); then `ejecutada`, `modificada` or `rechazada`, as the confirmation answered.",
	"DecisionExportada.caracteristicas_usadas": "The feature vector the decision was made with.",
	"ErrorV1":                                  "Error body of every 4xx and 5xx except 422. Never reveals internal details.",
	"ErrorV1.codigo":                           "One of the closed set of error codes (see `x-error-codes`).",
	"ErrorV1.campo":                            "Path of the failing field, if any.",
	"ErrorV1.trace_id":                         "Same value as the X-Trace-Id header; quote it to support.",
}

func responseFieldPatches() map[string]obj {
	codigos := []any{}
	for _, c := range errorCodes() {
		codigos = append(codigos, c.(obj)["codigo"])
	}
	estados := []any{api.EstadoEnCola, api.EstadoEnCurso, api.EstadoCompletado, api.EstadoFallido}
	return map[string]obj{
		"Decision.propension":        {"minimum": 0, "maximum": 1},
		"Decision.accion":            {"minimum": 0},
		"Decision.en_sombra":         {"const": true},
		"DetalleAccion.probabilidad": {"minimum": 0, "maximum": 1},
		"Rechazo.codigo":             {"enum": []any{"esquema_invalido", "campo_desconocido", "ts_fuera_de_rango", "duplicado"}},
		"Rechazo.mensaje":            {"maxLength": 512},
		"Rechazo.indice":             {"minimum": 0, "maximum": 999},
		"EstadoLote.estado":          {"enum": estados},
		"EstadoLote.resultado_url":   {"format": "uri"},
		"ErrorV1.codigo":             {"enum": codigos},
		"ErrorV1.mensaje":            {"maxLength": 512},
	}
}

// handSchemas adds the schemas of bodies the handlers build as maps, and
// those of the notification, the segment grammar and the validation error.
func (g *docGen) handSchemas() {
	g.answerSchemas()
	g.validationSchemas()
	g.segmentSchemas()
}

// answerSchemas adds the schemas of the answers the handlers build as maps.
func (g *docGen) answerSchemas() {
	g.schemas["RespuestaToken"] = obj{
		"type": "object",
		"properties": obj{
			"access_token": obj{"type": "string", "description": "Bearer token; send it as `Authorization: Bearer <access_token>`."},
			"expires_in":   obj{"type": "integer", "const": int(tokenTTL.Seconds()), "description": "Seconds the token lives."},
			"scope":        obj{"type": "string", "description": "The token's scopes joined by spaces."},
			"token_type":   obj{"type": "string", "const": "Bearer", "default": "Bearer"},
		},
		"required": []any{"access_token", "expires_in", "scope", "token_type"},
	}
	g.schemas["RespuestaEjecucion"] = obj{
		"type": "object",
		"properties": obj{
			"decision_id":      obj{"type": "string"},
			"estado_ejecucion": obj{"type": "string", "enum": []any{"ejecutada", "modificada", "rechazada"}},
		},
		"required": []any{"decision_id", "estado_ejecucion"},
	}
	g.schemas["RespuestaLoteDecisionV1"] = obj{
		"type":                 "object",
		"description":          "The job just created (202).",
		"additionalProperties": false,
		"properties": obj{
			"job_id":        obj{"type": "string"},
			"estado":        obj{"type": "string", "enum": []any{api.EstadoEnCola, api.EstadoEnCurso, api.EstadoCompletado, api.EstadoFallido}},
			"creado_en":     obj{"type": "string", "format": "date-time", "description": "UTC, suffix Z (tenant clock)."},
			"resultado_url": obj{"type": "string", "format": "uri", "description": "Present when the job is completed."},
		},
		"required": []any{"job_id", "estado", "creado_en"},
	}
	g.schemas["LineaResultado"] = obj{
		"description": "One line of a result file (JSONL): the Decision body plus `cliente_ref`. `detalle` is there when the job was created with scope `explicar:leer` and the download allows it (see the download routes).",
		"allOf": []any{
			schemaRef("Decision"),
			obj{"type": "object", "properties": obj{"cliente_ref": obj{"type": "string"}}, "required": []any{"cliente_ref"}},
		},
	}
	g.schemas["RegistroWebhook"] = obj{
		"type": "object",
		"properties": obj{
			"url":       obj{"type": "string", "format": "uri"},
			"eventos":   obj{"type": "array", "items": obj{"type": "string", "enum": []any{batch.EventLoteCompletado}}},
			"secreto":   obj{"type": "string", "pattern": "^whsec_[A-Za-z0-9+/]+={0,2}$", "description": "Signing secret, shown once: `whsec_` + base64 of 32 random bytes; the decoded bytes are the HMAC key (see `x-webhook-signature`)."},
			"creado_en": obj{"type": "string", "format": "date-time"},
		},
		"required": []any{"url", "eventos", "secreto", "creado_en"},
	}
	g.schemas["RegistroBorrado"] = obj{
		"type": "object",
		"properties": obj{
			"cliente_ref": obj{"type": "string"},
			"estado":      obj{"type": "string", "enum": []any{privacy.DeletionScheduled, privacy.DeletionCompleted}, "description": "`programado` when scheduled; the job moves the record to `completado`."},
		},
		"required": []any{"cliente_ref", "estado"},
	}
	g.schemas["ObjetoVacio"] = obj{"type": "object", "additionalProperties": false, "description": "An empty JSON object."}
	g.schemas["Estado"] = obj{
		"type":       "object",
		"properties": obj{"estado": obj{"type": "string", "enum": []any{"ok", "listo", "iniciando", "almacenamiento_lleno"}}, "motivo": obj{"type": "string"}},
		"required":   []any{"estado"},
	}
}

// validationSchemas adds the 422 body and its items.
func (g *docGen) validationSchemas() {
	g.schemas["ValidationError"] = obj{
		"type": "object",
		"properties": obj{
			"loc":   obj{"type": "array", "items": obj{"anyOf": []any{obj{"type": "string"}, obj{"type": "integer"}}}, "description": "Starts with `body`, `path`, `query` or `header`, then member names and array indices."},
			"msg":   obj{"type": "string", "description": "pydantic's English wording, or \"Value error, \" and the rule's own message."},
			"type":  obj{"type": "string", "description": "pydantic v2 error type; see `x-validation-error-types`."},
			"ctx":   obj{"type": "object"},
			"input": obj{"description": "The offending value; absent for `missing`."},
		},
		"required": []any{"loc", "msg", "type"},
	}
	g.schemas["HTTPValidationError"] = obj{
		"type":       "object",
		"properties": obj{"detail": obj{"type": "array", "items": schemaRef("ValidationError")}},
		"required":   []any{"detail"},
	}
}

// segmentSchemas adds the segment grammar (engine.ParseSegment).
func (g *docGen) segmentSchemas() {
	ops := obj{}
	for _, op := range []string{"<", "<=", ">", ">=", "==", "!="} {
		ops[op] = schemaRef("SegmentoComparacion")
	}
	list := obj{"type": "array", "minItems": 1, "items": schemaRef("SegmentoCondicion")}
	ops["y"] = withDesc(list, "All of them.")
	ops["o"] = withDesc(obj{"type": "array", "minItems": 1, "items": schemaRef("SegmentoCondicion")}, "Any of them.")
	ops["no"] = withDesc(schemaRef("SegmentoCondicion"), "Not.")
	g.schemas["Segmento"] = obj{
		"description": "Batch segment: `{\"todos\": true}` (every customer with history), or a condition. See `x-segment-grammar` and `x-customer-features`.",
		"oneOf": []any{
			obj{"type": "object", "properties": obj{"todos": obj{"type": "boolean", "const": true}}, "required": []any{"todos"}, "additionalProperties": false},
			schemaRef("SegmentoCondicion"),
		},
		"examples": []any{
			obj{"todos": true},
			obj{"y": []any{obj{"<=": obj{"recencia_dias": 30}}, obj{">=": obj{"gasto_90d_mxn": 500}}}},
			obj{"no": obj{"==": obj{"baja_comunicaciones": 1}}},
		},
	}
	g.schemas["SegmentoCondicion"] = obj{
		"type":                 "object",
		"description":          fmt.Sprintf("Exactly one operator. Nesting at most %d levels, %d objects and %d bytes of JSON in all.", engine.SegmentMaxDepth, engine.SegmentMaxNodes, engine.SegmentMaxBytes),
		"minProperties":        1,
		"maxProperties":        1,
		"properties":           ops,
		"additionalProperties": false,
	}
	names := []any{}
	for _, n := range engine.FeatureNames() {
		names = append(names, n)
	}
	g.schemas["SegmentoComparacion"] = obj{
		"type":          "object",
		"description":   "Exactly one feature compared with a number. An unknown feature is a value_error.",
		"minProperties": 1,
		"maxProperties": 1,
		"propertyNames": obj{"anyOf": []any{
			obj{"type": "string", "enum": names},
			obj{"type": "string", "pattern": "^" + engine.FeatureCategoryShare + ".", "maxLength": len(engine.FeatureCategoryShare) + 1024,
				"description": "Share of one category: the prefix and the category (`clave` of COMPRA_CAT), at most 1024 bytes."},
		}},
		"additionalProperties": obj{"type": "number"},
	}
}

// ---- operations ----

func pathID(desc string) obj {
	return obj{"schema": schema.JSONSchema(schema.ID()), "description": desc}
}

func jsonBody(ref string, example any) obj {
	return obj{"required": true, "content": obj{"application/json": obj{"schema": schemaRef(ref), "example": example}}}
}

var resultContent = obj{
	batch.ResultContentType: obj{
		"schema":       obj{"type": "string", "description": "JSONL: one LineaResultado per line."},
		"x-jsonl-item": schemaRef("LineaResultado"),
	},
}

var resultHeaders = obj{
	"Content-Encoding": obj{"description": "`zstd` when the request's Accept-Encoding allows it: the stored bytes are sent as they are. Otherwise absent and the body is decompressed on the fly; also absent when `detalle` is taken out of the lines (GET /v1/lotes-decision/{job_id}/resultado, or a `resultado_url` given, without `explicar:leer`).", "schema": obj{"type": "string", "enum": []any{"zstd"}}},
	"Cache-Control":    obj{"schema": obj{"type": "string", "const": "no-store"}},
}

var acceptEncoding = obj{"name": "Accept-Encoding", "in": "header", "required": false, "schema": obj{"type": "string"}, "description": "With `zstd` the file is sent as stored (`Content-Encoding: zstd`)."}

const ejemploCliente = "c9f86d081884c7d6"

// opDocs returns what the document says about each route, by route name,
// gathered from one table per group of routes.
func opDocs() (map[string]opDoc, error) {
	docs := map[string]opDoc{}
	for _, group := range []map[string]opDoc{operationDocs(), catalogDocs(), decisionDocs(), batchDocs(), customerDocs()} {
		for name, d := range group {
			if _, dup := docs[name]; dup {
				return nil, fmt.Errorf("openapi: opDocs has %q twice", name)
			}
			docs[name] = d
		}
	}
	return docs, nil
}

// operationDocs documents the routes outside /v1/ and the token endpoint.
func operationDocs() map[string]opDoc {
	return map[string]opDoc{
		"healthz": {tag: "operacion", summary: "Process is up", description: "Liveness: 200 as long as the process answers HTTP, even while starting (see /readyz).", okDesc: "Up.", okSchema: schemaRef("Estado")},
		"readyz": {tag: "operacion", summary: "Ready to serve", description: "503 until the store is open and recovery is done, and while the data dir's file system is below its reserve of free space (`motivo` says why).",
			okDesc: "Ready (`listo`).", okSchema: schemaRef("Estado"),
			otherResponses: obj{"503": obj{"description": "Starting (`iniciando`), or storage below its reserve (`almacenamiento_lleno`, with `motivo`). This body is not ErrorV1.", "headers": obj{"X-Trace-Id": headerRef("X-Trace-Id")}, "content": jsonContent(schemaRef("Estado"))}}},
		"metrics": {tag: "operacion", summary: "Prometheus metrics",
			description: "Prometheus text format: requests and latency histograms by route and status, Go runtime, Pebble disk use, read amplification, compaction debt, memtable and WAL sizes.",
			okDesc:      "Metrics.", okContent: obj{"text/plain": obj{"schema": obj{"type": "string"}}},
			// promhttp compresses when the scraper offers gzip (Prometheus does).
			okHeaders: obj{"Content-Encoding": obj{"description": "`gzip` when the request's `Accept-Encoding` offers it; absent otherwise.",
				"schema": obj{"type": "string", "enum": []any{"gzip"}}}}},
		"openapi": {tag: "operacion", summary: "This document", description: "The OpenAPI 3.1 document of this API, the same bytes as `server/openapi.json` of the release; generate clients from it.", okDesc: "The OpenAPI 3.1 document.",
			okContent: obj{"application/json": obj{"schema": obj{"type": "object"}}}},
		"token": {tag: "autenticacion", summary: "Get an access token",
			description: fmt.Sprintf("OAuth 2.0 client credentials, as JSON or as the standard form (client in HTTP Basic or in form fields). The token lives %s; `scope` is the credential's scopes joined by spaces. "+
				"A wrong secret, an unknown client and a revoked credential give the same 401 (same status, headers and body but `X-Trace-Id`, `Date` and `trace_id`). "+
				"The secret is checked first; only then is the credential's own rate limit (per `client_id`) charged, so knowing a client_id is not enough to lock it out. "+
				"Failed requests are limited per source address (IPv6: per /64; behind the operator's reverse proxy, the client's address from `X-Forwarded-For`), %d a second with a burst of %d; an address over that budget gets 429 for its failed attempts until it refills, while a right secret of an active credential still gets its token (a client left failing does not lock out the others at its address). "+
				"HTTP Basic together with credentials in the body (a `client_secret`, or a `client_id` other than Basic's) is 400 (OAuth 2.0 `invalid_request`). "+
				"Error bodies of a form request add RFC 6749's `error` and `error_description` for stock OAuth clients; those of a JSON request are `ErrorV1` and `HTTPValidationError` exactly.", humanDuration(tokenTTL), int(classRates[classTokenFailure].perSecond), classRates[classTokenFailure].burst),
			body: obj{"required": true, "content": obj{
				"application/json": obj{"schema": schemaRef("PeticionToken"),
					"example": obj{"client_id": "ci_acme_crm", "client_secret": "cs_…", "grant_type": "client_credentials"}},
				"application/x-www-form-urlencoded": obj{"schema": schemaRef("PeticionTokenForm"),
					"example": obj{"grant_type": "client_credentials", "scope": "eventos:publicar decisiones:pedir"}},
			}},
			security:  []any{obj{}, obj{"clientBasic": []any{}}},
			okDesc:    "The token.",
			okSchema:  schemaRef("RespuestaToken"),
			okHeaders: noStoreHeaders(),
			errors:    []kind{kindUnauthenticated, kindForbidden, kindRateLimited, kindTooLarge, kindNotJSON, kindBadRequest},
			validates: true, rateClass: classToken, rateKey: "client_id", oauthErrors: true},
	}
}

// catalogDocs documents the catalog, campaign and event routes.
func catalogDocs() map[string]opDoc {
	return map[string]opDoc{
		"catalogo_put": {tag: "catalogo", summary: "Replace the action catalog", description: "Replaces the whole catalog and increments its `version`. Decisions made afterwards choose among its active actions; the learned model of an action survives while its `id` stays.",
			body: jsonBody("Catalogo", obj{"acciones": []any{
				obj{"id": 1, "nombre": "10% abarrotes", "tipo_cupon": "PCT10_ABARROTES", "costo_envio_mxn": 0.5, "descuento_max_mxn": 50, "descuento_pct": 10, "canales": []any{"push", "email"}, "activa": true, "categorias": []any{"abarrotes"}},
				obj{"id": 2, "nombre": "$30 en tu próxima compra", "tipo_cupon": "MXN30", "costo_envio_mxn": 0.5, "descuento_max_mxn": 30, "activa": true},
			}}),
			okDesc: "The stored catalog with its new version.", okSchema: schemaRef("CatalogoRespuesta")},
		"catalogo_get": {tag: "catalogo", summary: "Read the action catalog", description: "Before any PUT: `{\"acciones\":[],\"version\":0}`.",
			okDesc: "The catalog.", okSchema: schemaRef("CatalogoRespuesta")},
		"campana_put": {tag: "campanas", summary: "Define a campaign", description: "Creates or replaces the campaign. Its budget applies to decisions and batch jobs that name it; sends already counted stay counted.",
			pathParams: map[string]obj{"campana_id": pathID("Campaign id (ID pattern).")},
			body:       jsonBody("Campana", obj{"canal": "push", "descripcion": "Navidad 2026", "max_descuento_mxn": 150000, "max_envios": 20000}),
			okDesc:     "The stored campaign.", okSchema: schemaRef("CampanaRespuesta")},
		"campana_get": {tag: "campanas", summary: "Read a campaign", description: "The campaign as defined, with its creation and update times.",
			pathParams: map[string]obj{"campana_id": pathID("Campaign id (ID pattern; otherwise 422 at `path.campana_id`).")},
			okDesc:     "The campaign.", okSchema: schemaRef("CampanaRespuesta"),
			errors: []kind{kindNotFound}, validates: true},

		"eventos": {tag: "eventos", summary: "Publish events",
			description: "Each event is checked on its own; a bad event is a rejection in `rechazados`, never a 422 for the request (422 only when the envelope itself is wrong, or when the body is not strict JSON anywhere: a syntax error, a member name repeated within one object, nesting deeper than 64, any of which makes the whole body unreadable, so none of its events is stored). " +
				"Each `event_id` is processed once per tenant: same content again counts in `duplicados`, different content is rejected with `duplicado`, within one request as across requests. " +
				"`ts` must lie between 1096 days before and 5 minutes after the tenant's clock.",
			body: jsonBody("PeticionEventos", obj{"eventos": []any{
				obj{"event_id": "tk-88121-abarrotes", "cliente_ref": ejemploCliente, "ts": "2026-11-01T18:42:10-06:00", "tipo": "COMPRA_CAT", "clave": "abarrotes", "valor": 412.5,
					"extra": obj{"ticket_id": "tk-88121", "margen": 96.3, "cantidad": 7, "tienda": "suc-014", "canal": "tienda", "ticket_total": 655.2}},
				obj{"event_id": "cr-55120", "cliente_ref": ejemploCliente, "ts": "2026-11-01T09:00:00Z", "tipo": "CUPON_RECIBIDO", "clave": "PCT10_ABARROTES", "valor": 50,
					"extra": obj{"cupon_emitido_id": "cup-55120", "campana_id": "navidad-2026", "caducidad": "2026-11-30T23:59:59-06:00", "canal": "push", "descuento_pct": 10}},
			}}),
			okDesc: "What was done with each event.", okSchema: schemaRef("RespuestaEventos")},
	}
}

// decisionDocs documents the online decision routes.
func decisionDocs() map[string]opDoc {
	return map[string]opDoc{
		"decisiones": {tag: "decisiones", summary: "Request an online decision",
			description: "Target answer time under 100 ms. If the customer has an open reward window (default 28 days) the answer is `accion` 0, `propension` 1 and the `decision_id`, `caduca_en` and `politica_version` of that open decision, with a `motivo` that begins `ventana de recompensa abierta hasta ` and says until when; no new decision is created, and that answer needs no confirmation (a confirmation of it would confirm the open decision). " +
				"If `contexto.campana_id` names a defined campaign its budget applies (spent: `accion` 0). At most 3 requests per `cliente_ref` per UTC day of the tenant clock (429 with Retry-After up to midnight and `campo` `cliente_ref`, which tells it from a rate limit or quota: the engine has decided for that customer today; idempotent replays do not count).",
			params: []any{obj{"name": "Idempotency-Key", "in": "header", "required": false,
				"description": "1 to 255 printable ASCII characters. Repeating the request with the same key within 24 hours returns the same decision; the same key with another body, or while the first is running, or once a fallback record named it in `Replaces-Idempotency-Key` and voided its decision or found it unanswered (`POST /v1/decisiones/respaldo`), is 409 `idempotencia_conflicto`. A bad key is 422 at `header.Idempotency-Key`.",
				"schema":      obj{"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7E]+$"}}},
			body:   jsonBody("PeticionDecision", obj{"cliente_ref": ejemploCliente, "contexto": obj{"canal": "push", "campana_id": "navidad-2026", "acciones_permitidas": []any{0, 1, 2}}}),
			okDesc: "The decision.", okSchema: schemaRef("Decision"),
			errors: []kind{kindIdempotencyConflict}},
		"ejecucion": {tag: "decisiones", summary: "Confirm the execution of a decision",
			description: "Mandatory for every decision, `accion` 0 included. One confirmation per decision, until `caduca_en`. An `accion_real` may name 0, an action of the tenant's catalog (active or not), a coupon an earlier catalog held (the last 1,000 to leave the catalog are remembered) or one of the decision's own candidates, its decided action included: a coupon sent before the catalog changed can be confirmed after. Any other id is 422 at `body.accion_real`. Then, in order: unknown, altered, invented or foreign id → 404; already confirmed → 409 `ejecucion_ya_confirmada`; after `caduca_en` → 409 `decision_caducada`.",
			pathParams:  map[string]obj{"decision_id": {"schema": obj{"type": "string"}, "description": "The decision's `decision_id`."}},
			params: []any{obj{"name": "Idempotency-Key", "in": "header", "required": false,
				"description": "Beyond the spec, for retries: 1 to 255 printable ASCII characters. Repeating the request (same `decision_id` and body) with the same key within 24 hours stores nothing more and answers the stored outcome again instead of 409 `ejecucion_ya_confirmada`, before the catalog and clock checks (a repeat whose `accion_real` has left the catalog since still gets it); the same key with another `decision_id` or body, or while the first is running, is 409 `idempotencia_conflicto`. A key is the tenant's, shared with `POST /v1/decisiones` and `POST /v1/decisiones/respaldo`: one used there is a conflict here. A bad key is 422 at `header.Idempotency-Key`. Without the header a second confirmation is 409 `ejecucion_ya_confirmada`.",
				"schema":      obj{"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7E]+$"}}},
			body:   jsonBody("PeticionEjecucion", obj{"ejecutada": true}),
			okDesc: "The outcome.", okSchema: schemaRef("RespuestaEjecucion"),
			errors: []kind{kindNotFound, kindAlreadyConfirmed, kindExpired, kindIdempotencyConflict}},
		"respaldo": {tag: "decisiones", summary: "Record a fallback decision",
			description: "Sent after the caller applied its own rule because the engine did not answer or was paused. Stored with propensity 1; does not open a reward window.",
			params: []any{obj{"name": "Idempotency-Key", "in": "header", "required": false,
				"description": "Beyond the spec, for retries: 1 to 255 printable ASCII characters. Repeating the request with the same key within 24 hours stores nothing more and answers the same empty object, before the catalog check (a repeat whose `accion` has left the catalog since still gets it); the same key with another body, or while the first is running, is 409 `idempotencia_conflicto`. A key is the tenant's, shared with `POST /v1/decisiones`: one used there is a conflict here. A bad key is 422 at `header.Idempotency-Key`.",
				"schema":      obj{"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7E]+$"}},
				obj{"name": "Replaces-Idempotency-Key", "in": "header", "required": false,
					"description": "Beyond the spec: the `Idempotency-Key` of the `POST /v1/decisiones` request whose answer never reached the caller (its budget ran out, the connection broke) and whose place this record takes. If that request was answered, within 24 hours, with a new decision for the same `cliente_ref` and `campana_id` that is still unconfirmed and whose reward is not yet final (its reward window and grace period not over), that decision is voided in this record's commit: `rechazada` with `motivo_rechazo` `sustituida por un registro de respaldo: la respuesta no llegó al cliente`, its send given back to the campaign budget, its reward window closed (the customer can be decided again at once), left out of learning and evaluation. A request still being answered is waited for up to 2 seconds. Anything else (an unknown or expired key, an answer that gave back an open window's decision, a decision already confirmed) voids nothing and is no error: the record is stored all the same. When the record voids the decision, or the key has answered nothing yet (an attempt still on its way), the key is spent: for 24 hours a request with it is 409 `idempotencia_conflicto` and decides nothing. The client library sends it with the fallback record `Decide` queues after sending attempts (not when its breaker was open or the deadline had passed before the first). A bad key is 422 at `header.Replaces-Idempotency-Key`.",
					"schema":      obj{"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7E]+$"}}},
			body:   jsonBody("PeticionRespaldo", obj{"accion": 1, "canal": "push", "cliente_ref": ejemploCliente, "campana_id": "navidad-2026"}),
			okDesc: "Recorded.", okSchema: schemaRef("ObjetoVacio"),
			errors: []kind{kindIdempotencyConflict}},
	}
}

// batchDocs documents the batch job routes.
func batchDocs() map[string]opDoc {
	jobID := pathID("Job id from POST /v1/lotes-decision (`lote_` + 16 characters). Unknown or another tenant's: 404.")
	return map[string]opDoc{
		"lotes_crear": {tag: "lotes", summary: "Create a batch decision job",
			description: "One job in progress per tenant and at most one per hour, and one creation request of the tenant read at a time (429 otherwise, before the body is read). If the sends of the policy exceed the campaign's `max_envios`, those with the highest expected margin are kept and the rest get `accion` 0; the budget applies before any randomization. On completion `lote.completado` is sent to the registered webhook.",
			body: obj{"required": true, "content": obj{"application/json": obj{"schema": schemaRef("PeticionLoteDecisionV1"), "examples": obj{
				"segmento": obj{"summary": "A segment", "value": obj{"campana_id": "navidad-2026", "segmento": obj{"y": []any{obj{"<=": obj{"recencia_dias": 30}}, obj{">=": obj{"gasto_90d_mxn": 500}}}}}},
				"clientes": obj{"summary": "A list of customers", "value": obj{"campana_id": "navidad-2026", "clientes": []any{ejemploCliente, "a41b0e77c2d94f10"}}},
			}}}},
			params: []any{obj{"name": "Idempotency-Key", "in": "header", "required": false,
				"description": "Beyond the spec, for retries: 1 to 255 printable ASCII characters. Repeating the request with the same key and body within 24 hours creates nothing and answers the first answer again (202, same `job_id`, `estado` and `creado_en` as first answered, same `Location`), even while the hourly limit or a job in progress holds new jobs back; past that limit anything else is 429. With the limit free, the same key with another body, or while the first is still being created, is 409 `idempotencia_conflicto`. A key is the tenant's, shared with `POST /v1/decisiones`, `POST /v1/decisiones/respaldo` and `POST /v1/decisiones/{decision_id}/ejecucion`: one used there is a conflict here. A bad key is 422 at `header.Idempotency-Key`.",
				"schema":      obj{"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7E]+$"}}},
			status: http.StatusAccepted, okDesc: "Queued (or, for a repeat with the same Idempotency-Key, the first answer).", okSchema: schemaRef("RespuestaLoteDecisionV1"),
			okHeaders: obj{"Location": obj{"required": true, "description": "The job's status: `/v1/lotes-decision/{job_id}`.", "schema": obj{"type": "string", "format": "uri-reference"}}},
			errors:    []kind{kindIdempotencyConflict}},
		"lotes_estado": {tag: "lotes", summary: "Read a batch job", description: "Progress (`procesados` of `total`) and state; once `completado`, `resultado_url` is a signed download URL. The `Location` of the 202 that created the job.",
			pathParams: map[string]obj{"job_id": jobID},
			okDesc:     "The job.", okSchema: schemaRef("EstadoLote"), errors: []kind{kindNotFound},
			okHeaders: obj{"Cache-Control": obj{"schema": obj{"type": "string", "const": "no-store"}}}},
		"lotes_resultado": {tag: "lotes", summary: "Download a batch result with the token",
			description: fmt.Sprintf("The JSONL result (`%s`), one LineaResultado per line. 404 while the job is not completed and after the result's retention (%s). `detalle` follows the caller's scope, as for an online decision: a job created with `explicar:leer` has it in every line, and a caller without `explicar:leer` gets the same lines without it (decompressed, whatever Accept-Encoding asks).", batch.ResultContentType, isoDuration(batch.ResultRetention)),
			pathParams:  map[string]obj{"job_id": jobID},
			params:      []any{acceptEncoding},
			okDesc:      "The result file.", okContent: resultContent, okHeaders: resultHeaders, errors: []kind{kindNotFound},
			validates: true}, // spec: the batch result documents 422
		"lotes_descarga": {tag: "lotes", summary: "Download a batch result by its signed URL",
			description: "The `resultado_url` of a completed job: no token (it is a secret, do not share it). Any parameter changed, repeated, added or missing, an expired URL, a URL whose credential was revoked or suspended or whose secret's rotation grace ended, or a result no longer kept: 404 `no_encontrado`, never data. A URL that passes those checks for a tenant the operator paused: 503 `inquilino_pausado` with `Retry-After`, as every route of a paused tenant (it downloads again once the tenant is resumed and while the URL lives). See `x-signed-result-url`. It follows the scope of the credential whose status query gave the URL: the lines as stored, `detalle` included when the job was created with `explicar:leer` and that credential has it; without `explicar:leer`, the same lines without `detalle` (decompressed, whatever Accept-Encoding asks).",
			pathParams:  map[string]obj{"job_id": jobID},
			params: []any{
				obj{"name": "t", "in": "query", "required": true, "description": "Tenant.", "schema": obj{"type": "string"}},
				obj{"name": "c", "in": "query", "required": true, "description": "Client id of the credential whose status query gave the URL: the URL ends with that credential's tokens.", "schema": obj{"type": "string"}},
				obj{"name": "g", "in": "query", "required": true, "description": "Secret generation of the token that status query used (0 before any rotation).", "schema": obj{"type": "integer", "minimum": 0}},
				obj{"name": "exp", "in": "query", "required": true, "description": "Expiry, unix seconds.", "schema": obj{"type": "integer"}},
				obj{"name": "sig", "in": "query", "required": true, "description": "Signature: unpadded base64url HMAC-SHA256.", "schema": obj{"type": "string", "pattern": "^[A-Za-z0-9_-]{43}$"}},
				acceptEncoding,
			},
			okDesc: "The result file.", okContent: resultContent, okHeaders: resultHeaders, errors: []kind{kindNotFound, kindPaused}},
	}
}

// customerDocs documents the customer rights and webhook routes.
func customerDocs() map[string]opDoc {
	return map[string]opDoc{
		"clientes_borrar": {tag: "clientes", summary: "Delete a customer (right to be forgotten)",
			description: "Schedules the deletion and answers 202 with the deletion record; a job then removes everything in the data dir that names the customer (events, features, decisions, confirmations, attribution links, idempotency records, stored batch requests and result files; access-log entries are rewritten to a keyed hash) and moves the record to `completado`. " +
				"Backups carry a deletion ledger re-applied on restore. Afterwards the export shows nothing but the deletion record. Events sent for the customer later (an erased event's `event_id` too) are accepted as a new history, listed beside the completed record; a new DELETE erases them. No body.",
			pathParams: map[string]obj{"cliente_ref": {"schema": schema.JSONSchema(schema.ClienteRef()), "description": "The customer (422 at `path.cliente_ref` if it breaks the cliente_ref rules)."}},
			status:     http.StatusAccepted, okDesc: "Scheduled.", okSchema: schemaRef("RegistroBorrado"), validates: true,
			okHeaders: obj{"Location": obj{"required": true, "description": "Where to follow the deletion: the customer's export `/v1/clientes/{cliente_ref}/exportacion`, whose `borrado` goes from `programado` to `completado`.", "schema": obj{"type": "string", "format": "uri-reference"}}}},
		"clientes_exportar": {tag: "clientes", summary: "Export a customer (right of access)",
			description: "Everything the engine holds about the customer: events as received (those held by the abuse guard's quarantine, accepted but not yet applied, included, after the others), derived features, decisions, confirmations, coupon links and the pending or completed deletion, all read as of one moment (what is written while the answer streams is in the next export). Every call is written to the access log (`coupond admin access-log`). An unknown customer gets 200 with empty collections.",
			pathParams:  map[string]obj{"cliente_ref": {"schema": schema.JSONSchema(schema.ClienteRef()), "description": "The customer (422 at `path.cliente_ref` if it breaks the cliente_ref rules)."}},
			okDesc:      "The export.", okSchema: schemaRef("ExportacionCliente"),
			okHeaders: obj{"Cache-Control": obj{"schema": obj{"type": "string", "const": "no-store"}}}, validates: true},

		"webhooks_put": {tag: "webhooks", summary: "Register the webhook",
			description: "Replaces the tenant's webhook and issues a new signing secret, shown once. Deliveries: see `webhooks` and `x-webhook-signature`.",
			body:        jsonBody("PeticionWebhook", obj{"url": "https://crm.example.com/webhooks/coupond", "eventos": []any{batch.EventLoteCompletado}}),
			okDesc:      "The registration, with its secret.", okSchema: schemaRef("RegistroWebhook"),
			okHeaders: obj{"Cache-Control": obj{"schema": obj{"type": "string", "const": "no-store"}}}},
		"webhooks_delete": {tag: "webhooks", summary: "Remove the webhook", description: "Pending deliveries are dropped.",
			okDesc: "Removed (also when none was registered).", okSchema: schemaRef("ObjetoVacio")},
	}
}

func webhookOperation() obj {
	hdr := func(name, desc string, s obj) obj {
		return obj{"name": name, "in": "header", "required": true, "description": desc, "schema": s}
	}
	return obj{
		"operationId": "lote_completado",
		"summary":     "A batch job completed",
		"description": "POSTed to the registered URL when a batch job completes, following Standard Webhooks (see `x-webhook-signature`). " +
			"Any 2xx acknowledges; anything else, a redirect or no answer within 10 seconds is retried with exponential backoff (first retry within 10 seconds, " +
			"12 attempts over more than 24 hours), with the same `webhook-id`.",
		"parameters": []any{
			hdr("webhook-id", "Message id (`msg_<job_id>`), the same on every retry: deduplicate on it.", obj{"type": "string"}),
			hdr("webhook-timestamp", "Unix seconds of this attempt.", obj{"type": "string", "pattern": "^[0-9]+$"}),
			hdr("webhook-signature", "`v1,` + standard base64 of HMAC-SHA256(key, `<webhook-id>.<webhook-timestamp>.<body>`).", obj{"type": "string", "pattern": "^v1,[A-Za-z0-9+/]+={0,2}$"}),
		},
		// The payload schema is inline: a component referred to from
		// webhooks only is pruned by oapi-codegen, whose output then
		// names a type it did not generate.
		"requestBody": obj{"required": true, "content": jsonContent(loteCompletadoSchema())},
		"responses":   obj{"2XX": obj{"description": "Delivered."}},
		"security":    []any{obj{"webhookSignature": []any{}}},
	}
}

// loteCompletadoSchema is the payload of the lote.completado webhook.
func loteCompletadoSchema() obj {
	return obj{
		"title":       "LoteCompletado",
		"type":        "object",
		"description": "Payload of the `lote.completado` notification.",
		"properties": obj{
			"tipo":          obj{"type": "string", "const": batch.EventLoteCompletado},
			"job_id":        obj{"type": "string"},
			"campana_id":    obj{"type": "string"},
			"estado":        obj{"type": "string", "const": api.EstadoCompletado},
			"lineas":        obj{"type": "integer", "description": "Lines of the result file when the job completed."},
			"completado_en": obj{"type": "string", "format": "date-time"},
		},
		"required": []any{"tipo", "job_id", "campana_id", "estado", "lineas", "completado_en"},
	}
}

// ---- documentation of choices ----

func errorCodes() []any {
	var out []any
	seen := map[string]bool{}
	for _, k := range allKinds() {
		row := errorTable[k]
		if seen[row.codigo] {
			continue
		}
		seen[row.codigo] = true
		statuses := []any{}
		var when []string
		for _, k2 := range allKinds() {
			if errorTable[k2].codigo == row.codigo {
				statuses = append(statuses, errorTable[k2].status)
				when = append(when, kindDocs[k2])
			}
		}
		e := obj{"codigo": row.codigo, "status": statuses, "when": strings.Join(when, " ")}
		if row.codigo == "esquema_invalido" {
			e["when"] = e["when"].(string) + " In `rechazados`: " + eventOnlyCodes[0].when + "."
		}
		out = append(out, e)
	}
	for _, c := range eventOnlyCodes[1:] {
		out = append(out, obj{"codigo": c.codigo, "status": []any{}, "when": "Only in `rechazados` of POST /v1/eventos: " + c.when + "."})
	}
	return out
}

func validationErrorTypes() []any {
	var out []any
	for _, t := range schema.ErrorTypes() {
		out = append(out, obj{"type": t.Type, "meaning": t.Meaning})
	}
	return out
}

func customerFeatures() []any {
	var out []any
	for _, f := range engine.FeatureDocs() {
		out = append(out, obj{"name": f.Name, "doc": f.Doc})
	}
	return out
}

var segmentGrammar = fmt.Sprintf(`segment := {"todos": true}                  only at the top: every customer with history
         | {"<op>": {"<feature>": number}}  op: <, <=, >, >=, ==, != ; feature: x-customer-features
         | {"y": [segment, ...]}            all of them (at least one)
         | {"o": [segment, ...]}            any of them (at least one)
         | {"no": segment}                  not
Each object holds exactly one operator and a comparison exactly one feature; an unknown feature or operator is 422 (loc body.segmento...). At most %d levels of nesting, %d objects and %d bytes of JSON (without whitespace).`,
	engine.SegmentMaxDepth, engine.SegmentMaxNodes, engine.SegmentMaxBytes)

func signedURLDoc() obj {
	return obj{
		"format":      "{base_url}/v1/lotes-decision/{job_id}/descarga?t={tenant}&c={client_id}&g={secret generation}&exp={unix seconds}&sig={signature}",
		"signature":   "unpadded base64url HMAC-SHA256, under the installation's URL key, of the method GET, the path /v1/lotes-decision/{job_id}/descarga, the tenant, the client id and secret generation of the credential whose status query minted the URL, the job id and exp, each length-prefixed",
		"ttl_seconds": int(batch.ResultURLTTL.Seconds()),
		"rules":       "Valid while the current (real) time is before exp (an hour, whatever the life of the token it was minted with) and the credential that minted it stays active with that token's secret still accepted: a revocation, a suspension or the end of a rotation's grace ends its URLs too (404). The query must hold exactly t, c, g, exp and sig, once each, in the encoding the server produced; anything else is 404. A new status query gives a new URL. URLs an earlier release minted (t, exp and sig only, bound to no credential) work until their exp.",
	}
}

func rateLimitsDoc() obj {
	return obj{
		"decisiones": obj{"per_second": classRates[classDecisiones].perSecond, "burst": classRates[classDecisiones].burst, "per": "credential"},
		"eventos":    obj{"per_second": classRates[classEventos].perSecond, "burst": classRates[classEventos].burst, "per": "credential"},
		"ejecucion":  obj{"per_second": classRates[classEjecucion].perSecond, "burst": classRates[classEjecucion].burst, "per": "credential"},
		"otros":      obj{"per_second": classRates[classOther].perSecond, "burst": classRates[classOther].burst, "per": "credential"},
		"token":      obj{"per_second": classRates[classToken].perSecond, "burst": classRates[classToken].burst, "per": "client_id", "charged": "only after the secret matched"},
		"token_fallidos": obj{"per_second": classRates[classTokenFailure].perSecond, "burst": classRates[classTokenFailure].burst, "per": "source address (IPv6: /64)",
			"description": "Failed token requests; an address over the budget gets 429 for each failed attempt until the bucket refills. A right secret of an active credential is never refused by this budget."},
		"estado":        "Bounded per-key state, least recently used evicted first; never reset as a whole. Made-up client_ids create no state.",
		"por_cliente":   obj{"decisions_per_day": engine.DailyCap, "per": "cliente_ref, UTC day of the tenant clock; requests to POST /v1/decisiones (a batch line opens the customer's reward window but takes none of them)"},
		"lotes":         quotaDocs[quotaBatch]["description"],
		"retry_after":   "integer seconds, at least 1",
		"anomalous_use": "Peaks of 10 times the usual rate, many errors or repeated reloads of history escalate, one step at a time: warning, brake (reduced rate limits), quarantine of new events (accepted and kept, applied when the operator releases them), suspension of the credential (401).",
	}
}

func idempotencyDoc() obj {
	return obj{
		"header":    "Idempotency-Key",
		"routes":    []any{"POST /v1/decisiones", "POST /v1/decisiones/respaldo", "POST /v1/decisiones/{decision_id}/ejecucion", "POST /v1/lotes-decision"},
		"format":    "1 to 255 printable ASCII characters",
		"retention": isoDuration(engine.IdempotencyTTL),
		"conflict":  "409 idempotencia_conflicto: same key with a different body, while the first request is still running, or a key a fallback record's Replaces-Idempotency-Key spent",
		"events":    "POST /v1/eventos is idempotent by event_id instead: same canonical content (keys sorted, numbers by value, null as absent, timestamps by instant) counts in duplicados",
	}
}

func webhookSignatureDoc() obj {
	return obj{
		"convention":   "Standard Webhooks (https://www.standardwebhooks.com/)",
		"headers":      []any{"webhook-id", "webhook-timestamp", "webhook-signature"},
		"signed":       "<webhook-id>.<webhook-timestamp>.<raw body>",
		"signature":    "v1,<standard base64 (padded) of HMAC-SHA256>",
		"key":          "the registration's secreto: whsec_ + base64 of 32 bytes; the HMAC key is the decoded bytes",
		"verification": "Recompute the HMAC over the raw body and compare in constant time; refuse timestamps far from now (e.g. more than 5 minutes) and repeated webhook-id.",
		"retries":      "exponential backoff with jitter for more than 24 hours (12 attempts), first retry within 10 seconds; each attempt signed afresh with its own timestamp",
	}
}

func infoDescription() string {
	var b strings.Builder
	b.WriteString(`coupond decides, for each customer and campaign, which coupon of the tenant's action catalog to send (or none, action 0), logs the exact propensity of each choice and learns from what customers then buy. It never reads the caller's CRM: everything goes through this API.

Flow: publish events (POST /v1/eventos); request decisions online (POST /v1/decisiones) or in batch (POST /v1/lotes-decision); confirm every decision's execution (POST /v1/decisiones/{decision_id}/ejecucion) and label the CUPON_RECIBIDO event with its decision_id. Without confirmation and labelling the engine decides but does not learn.

## Conventions

- Bodies are JSON (Content-Type application/json or *+json; none given is taken as JSON; anything else is 415). Strict: unknown members (names are case-sensitive), duplicate keys, trailing data and nesting deeper than 64 are refused, every violation listed at once (up to ` + strconv.Itoa(schema.MaxViolations) + `, then one value_error counting them) in a 422 HTTPValidationError whose ` + "`type`" + ` uses pydantic v2's vocabulary (x-validation-error-types).
- Money is MXN without VAT, a JSON number with at most two decimals, kept as integer cents. Timestamps are ISO-8601 with their zone and are returned in UTC with the suffix Z.
- ID pattern: ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$. A cliente_ref (8 to 128 characters) is a salted hash; values that look like telephone numbers or e-mail addresses are refused.
- Success is 200 except 202 for POST /v1/lotes-decision and DELETE /v1/clientes/{cliente_ref}. Every 4xx and 5xx has the ErrorV1 body except 422 (HTTPValidationError); the set of codigos is closed (x-error-codes). Unknown path or method: 404 no_encontrado. Every response carries X-Trace-Id.
- Hostile input (contract §8): strings refuse control characters other than tab and newline (422 value_error; inside POST /v1/eventos a per-event esquema_invalido). A 422 never echoes secrets (the input of client_secret, secreto and tokens is "***", and so is any echoed string holding a client secret, access token or webhook secret, whatever member carried it) and cuts echoed strings to 256 characters and an echoed array or object to ` + strconv.Itoa(schema.MaxEchoValues) + ` values (itself, then its first items and members in document order; msg and ctx keep the full length). A msg that quotes what was sent (an unknown segment operator or feature, a URL's port or host) is cut to 256 characters, a secret in it "***". A body with broken framing (bad chunks, ends early, slower than the read timeout) or a request with both Content-Length and Transfer-Encoding is 400 esquema_invalido, and the connection is closed. Headers must arrive within 5 s, a whole request within 30 s (serve --read-timeout); idle keep-alive connections close after 120 s.
- Order of checks on authenticated routes: 401 (token) → 403 (scope) → 503 (tenant paused) → 429 (rate limit, quota) → 413/415 (body size, content type) → 422 (validation) → the route's own rules.
- Authentication: POST /v1/token (OAuth 2.0 client credentials, JSON or form) gives a bearer token that lives 15 minutes. Each route's scope is in its security requirement and in x-scopes. explicar:leer adds detalle to decisions.

## Choices beyond the contract

- Decision ids are d<tenant>.<nonce>.<mac> (ID pattern, at most 128 characters): signed, bound to the tenant, checked without a store read. An event whose decision_id is not a valid id of the tenant is rejected (esquema_invalido, campo decision_id).
- detalle (scope explicar:leer) is on every decision: {"acciones":[{"accion","mu_mxn","sigma_mxn","probabilidad"}]}, one row per eligible action, 0 included; mu_mxn is the expected reward in MXN over the reward window.
- Event idempotency compares canonical JSON (keys sorted, numbers by value, a null member as absent, ts and extra.caducidad by their UTC instant): a resend that reorders keys, writes 100.0 for 100, null for an absent optional field or the same instant in another offset is a duplicate, not a conflict. So does an Idempotency-Key's "same body" (decisions, fallback records, confirmations, batch creations): a repeat that respaces, reorders keys or respells numbers replays.
- Fallback records must name 0, an action of the catalog or a coupon an earlier catalog held (the last 1,000 to leave it are remembered), since the caller's rule may have sent it before the catalog changed (422 at body.accion otherwise). A confirmation's accion_real may name the same, or one of the decision's candidates; any other id is 422 at body.accion_real.
- Campaign budget: each send reserves the action's descuento_max_mxn against max_descuento_mxn (a percentage coupon without descuento_max_mxn is never sent under that cap); a rechazada confirmation or an expired unconfirmed decision gives it back. The budget counts what was sent: a modificada confirmation gives the decided send back and, when accion_real is not 0, counts accion_real's (one send, its descuento_max_mxn; a coupon that left the catalog since: the one it had when it left), past the caps too (it went out; in shadow mode the engine's suggestions spend nothing). A fallback record with accion not 0 and the campana_id of a defined campaign counts its send the same way (a retired coupon's descuento_max_mxn as it left), past the caps too; a keyed replay counts nothing more.
- Batch jobs need a defined campaign (422 at body.campana_id); the campaign's canal is the channel. Segments: x-segment-grammar over x-customer-features. A job interrupted by a restart ends fallido; failed jobs do not count toward the one-per-hour limit.
`)
	fmt.Fprintf(&b, "- Result files are kept %s from the job's completion (real time, also for sandbox tenants; x-result-retention); then GET …/resultado and the signed URL answer 404 and the status has no resultado_url. The signed URL (x-signed-result-url) lives %s.\n", humanDuration(batch.ResultRetention), humanDuration(batch.ResultURLTTL))
	b.WriteString(`- Customer data rights: GET /v1/clientes/{cliente_ref}/exportacion returns everything held (each call is written to the access log; an unknown customer gets empty collections); DELETE /v1/clientes/{cliente_ref} answers 202 with the deletion record (programado, then completado) and reaches everything in the data dir that names the customer.
- Webhooks follow Standard Webhooks (x-webhook-signature); the payload of lote.completado is the request body of webhooks.lote.completado.
- Idempotency-Key on POST /v1/decisiones and, beyond the spec, on POST /v1/decisiones/respaldo, POST /v1/decisiones/{decision_id}/ejecucion and POST /v1/lotes-decision (x-idempotency); a batch creation's repeat is answered with the first job past the hourly limit too.
- Daily quotas are counted in memory and written every 5 seconds: a crash can forget up to 5 seconds of use.
`)
	return b.String()
}
