package client_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coupond/coupond/client"
)

// TestTypesMatchOpenAPI compares the client's types with the OpenAPI
// document the real server serves, field by field: the same JSON names, a
// field required by the document has no omitempty and an optional one has,
// a field that may be null can hold nil, and the JSON types agree
// (date-time strings are time.Time). Every schema of the document is either
// compared or listed as one the client does not model, so a schema added to
// the server fails here until the client decides.
func TestTypesMatchOpenAPI(t *testing.T) {
	ts := newTestServer(t)
	resp, err := http.Get(ts.url + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
		Webhooks map[string]struct {
			Post struct {
				RequestBody struct {
					Content map[string]struct {
						Schema map[string]any `json:"schema"`
					} `json:"content"`
				} `json:"requestBody"`
			} `json:"post"`
		} `json:"webhooks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	cmpr := &schemaComparer{schemas: doc.Components.Schemas}

	types := map[string]any{
		"PeticionDecision": client.PeticionDecision{}, "Decision": client.Decision{}, "Detalle": client.Detalle{},
		"DetalleAccion": client.DetalleAccion{}, "PeticionEjecucion": client.PeticionEjecucion{},
		"RespuestaEjecucion": client.RespuestaEjecucion{}, "PeticionRespaldo": client.PeticionRespaldo{},
		"RespuestaEventos": client.RespuestaEventos{}, "Rechazo": client.Rechazo{}, "Campana": client.Campana{},
		"CampanaRespuesta": client.CampanaRespuesta{}, "Catalogo": client.Catalogo{}, "CatalogoRespuesta": client.CatalogoRespuesta{},
		"AccionCatalogoRespuesta": client.AccionCatalogoRespuesta{}, "RegistroBorrado": client.RegistroBorrado{},
		"ExportacionCliente": client.ExportacionCliente{}, "EventoExportado": client.EventoExportado{},
		"DecisionExportada": client.DecisionExportada{}, "ConfirmacionExportada": client.ConfirmacionExportada{},
		"VinculoCupon": client.VinculoCupon{}, "BorradoExportado": client.BorradoExportado{},
		"PeticionLoteDecisionV1": client.PeticionLoteDecision{}, "RespuestaLoteDecisionV1": client.RespuestaLoteDecision{},
		"EstadoLote": client.EstadoLote{}, "LineaResultado": client.LineaResultado{}, "PeticionWebhook": client.PeticionWebhook{},
		"RegistroWebhook": client.RegistroWebhook{}, "ErrorV1": client.ErrorV1{},
		"HTTPValidationError": client.HTTPValidationError{}, "ValidationError": client.ValidationItem{},
	}
	events := map[string]client.ExtraEvento{
		"COMPRA_CAT": &client.ExtraCompraCat{}, "CUPON_RECIBIDO": &client.ExtraCuponRecibido{}, "CUPON_REDIMIDO": &client.ExtraCuponRedimido{},
		"CUPON_CADUCADO": &client.ExtraCuponCaducado{}, "BAJA": &client.ExtraBaja{}, "ALTA": &client.ExtraAlta{},
	}
	// Schemas the client does not model as types, and why.
	notModelled := map[string]string{
		"Estado":                   "health checks are for operators",
		"PeticionToken":            "golang.org/x/oauth2 sends the token request",
		"PeticionTokenForm":        "golang.org/x/oauth2 sends the token request",
		"RespuestaToken":           "golang.org/x/oauth2 reads the token answer",
		"ObjetoVacio":              "an empty answer",
		"ErrorToken":               "errors of the token endpoint: tokenError reads them into *Error",
		"HTTPValidationErrorToken": "errors of the token endpoint: tokenError reads them into *Error",
		"Evento":                   "the union of the Evento_* schemas, compared one by one with Evento",
		"PeticionEventos":          "PublishEvents builds the envelope {\"eventos\":[…]} itself",
		"Segmento":                 "Segmento is a free map",
		"SegmentoComparacion":      "part of Segmento",
		"SegmentoCondicion":        "part of Segmento",
	}
	for name := range doc.Components.Schemas {
		_, typed := types[name]
		_, skipped := notModelled[name]
		if !typed && !skipped && !strings.HasPrefix(name, "Evento_") {
			t.Errorf("schema %s is in the document but not in the client", name)
		}
	}
	names := make([]string, 0, len(types))
	for n := range types {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("client type %T has no schema %s in the document", types[name], name)
			continue
		}
		cmpr.value(name, s, reflect.TypeOf(types[name]))
	}
	// The lote.completado notification, described under webhooks.
	if hook, ok := doc.Webhooks["lote.completado"]; !ok {
		t.Error("no webhook lote.completado in the document")
	} else {
		cmpr.value("webhooks.lote.completado", hook.Post.RequestBody.Content["application/json"].Schema, reflect.TypeOf(client.LoteCompletado{}))
	}
	// Events: Evento's common fields against every Evento_* schema, its
	// Extra against the schema of the type's extra.
	evType := reflect.TypeOf(client.Evento{})
	for tipo, extra := range events {
		name := "Evento_" + tipo
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		cmpr.eventVariant(name, s, evType, reflect.TypeOf(extra).Elem(), doc.Components.Schemas)
	}
	for _, e := range cmpr.errs {
		t.Error(e)
	}
}

// pendingFields are client fields the server adds on another branch; until
// the document has them they are not compared, afterwards they are.
var pendingFields = map[string]bool{
	"AccionCatalogo.categorias":          true,
	"AccionCatalogoRespuesta.categorias": true,
}

// nullAsAbsent are request fields the server reads the same null or
// absent: the client, which only sends them, omits the zero value (omitempty)
// and needs no pointer to say null.
var nullAsAbsent = map[string]bool{
	"PeticionDecision.contexto.campana_id": true,
}

type schemaComparer struct {
	schemas map[string]map[string]any
	errs    []string
}

func (c *schemaComparer) errorf(format string, a ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, a...))
}

// resolve follows $ref and merges allOf; it reports whether the schema
// admits null.
func (c *schemaComparer) resolve(s map[string]any) (map[string]any, bool) {
	if ref, ok := s["$ref"].(string); ok {
		return c.resolve(c.schemas[strings.TrimPrefix(ref, "#/components/schemas/")])
	}
	if all, ok := s["allOf"].([]any); ok {
		merged := map[string]any{"type": "object", "properties": map[string]any{}, "required": []any{}}
		for _, part := range all {
			p, _ := c.resolve(part.(map[string]any))
			for k, v := range props(p) {
				merged["properties"].(map[string]any)[k] = v
			}
			merged["required"] = append(merged["required"].([]any), asList(p["required"])...)
			if p["type"] != nil && p["type"] != "object" {
				return p, false
			}
		}
		return merged, false
	}
	if alts, ok := s["anyOf"].([]any); ok {
		var rest []any
		null := false
		for _, alt := range alts {
			if alt.(map[string]any)["type"] == "null" {
				null = true
			} else {
				rest = append(rest, alt)
			}
		}
		if len(rest) == 1 {
			inner, n := c.resolve(rest[0].(map[string]any))
			return inner, null || n
		}
		return map[string]any{"anyOf": rest}, null
	}
	if list, ok := s["type"].([]any); ok {
		out := map[string]any{}
		for k, v := range s {
			out[k] = v
		}
		null := false
		var types []any
		for _, ty := range list {
			if ty == "null" {
				null = true
			} else {
				types = append(types, ty)
			}
		}
		if len(types) == 1 {
			out["type"] = types[0]
		} else {
			out["type"] = types
		}
		return out, null
	}
	return s, false
}

func props(s map[string]any) map[string]any {
	p, _ := s["properties"].(map[string]any)
	return p
}

func asList(v any) []any { l, _ := v.([]any); return l }

var timeType = reflect.TypeOf(time.Time{})

// nilable reports whether a Go type can hold JSON null.
func nilable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

// value compares a schema with the Go type that holds its values.
func (c *schemaComparer) value(path string, raw map[string]any, t reflect.Type) {
	s, _ := c.resolve(raw)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if _, ok := s["anyOf"]; ok || s["oneOf"] != nil || s["type"] == nil && s["const"] == nil && props(s) == nil {
		// A union (such as 422 loc items, or input of any type) or a
		// free-form segment: held as any or a map.
		if t.Kind() != reflect.Interface && t.Kind() != reflect.Map {
			c.errorf("%s: union or any schema held as %v, want any or a map", path, t)
		}
		return
	}
	ty, _ := s["type"].(string)
	want := map[string][]reflect.Kind{
		"string": {reflect.String}, "integer": {reflect.Int, reflect.Int64}, "number": {reflect.Float64},
		"boolean": {reflect.Bool}, "array": {reflect.Slice}, "object": {reflect.Struct, reflect.Map},
	}[ty]
	switch {
	case ty == "string" && s["format"] == "date-time":
		if t != timeType {
			c.errorf("%s: date-time held as %v, want time.Time", path, t)
		}
		return
	case t == timeType:
		c.errorf("%s: %v schema held as time.Time", path, s["type"])
		return
	case !slices.Contains(want, t.Kind()):
		c.errorf("%s: schema type %v held as %v", path, s["type"], t)
		return
	}
	switch {
	case ty == "array":
		if items, ok := s["items"].(map[string]any); ok {
			c.value(path+"[]", items, t.Elem())
		}
	case ty == "object" && t.Kind() == reflect.Struct:
		c.object(path, s, t, nil)
	case ty == "object" && props(s) != nil:
		c.errorf("%s: object with properties held as %v, want a struct", path, t)
	case ty == "object":
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			c.value(path+"{}", ap, t.Elem())
		}
	}
}

// goField is one JSON field of a Go struct.
type goField struct {
	name     string
	typ      reflect.Type
	optional bool // omitempty or omitzero
}

// jsonFields lists a struct's JSON fields as encoding/json sees them,
// embedded structs flattened.
func jsonFields(t reflect.Type) []goField {
	var out []goField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && tag == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, goField{name: name, typ: f.Type, optional: strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")})
	}
	return out
}

// object compares an object schema with a struct. requiredIn, when set,
// overrides the required rule for a union (see eventVariant).
func (c *schemaComparer) object(path string, s map[string]any, t reflect.Type, fieldCheck func(goField, bool, bool)) {
	ps := props(s)
	required := map[string]bool{}
	for _, r := range asList(s["required"]) {
		required[r.(string)] = true
	}
	seen := map[string]bool{}
	for _, f := range jsonFields(t) {
		fp := path + "." + f.name
		seen[f.name] = true
		ps1, ok := ps[f.name].(map[string]any)
		if !ok {
			if !pendingFields[t.Name()+"."+f.name] {
				c.errorf("%s: the client has field %s (%v), the document does not", path, f.name, f.typ)
			}
			continue
		}
		_, null := c.resolve(ps1)
		if fieldCheck != nil {
			fieldCheck(f, required[f.name], null)
		} else {
			c.checkField(fp, f, required[f.name], null)
		}
		if fieldCheck == nil || f.name != "extra" {
			c.value(fp, ps1, f.typ)
		}
	}
	for name := range ps {
		if !seen[name] {
			c.errorf("%s: the document has field %s, the client does not", path, name)
		}
	}
}

// checkField compares required and nullable.
func (c *schemaComparer) checkField(path string, f goField, required, null bool) {
	switch {
	case required && f.optional:
		c.errorf("%s: required by the document, omitempty in the client", path)
	case !required && !f.optional:
		c.errorf("%s: optional in the document, always sent by the client (add omitempty)", path)
	}
	if null && !nilable(f.typ) && !(nullAsAbsent[path] && f.optional) {
		c.errorf("%s: may be null, held as %v which cannot", path, f.typ)
	}
	if !null && f.typ.Kind() == reflect.Pointer && !f.optional {
		c.errorf("%s: may not be null, but a nil %v is sent as null", path, f.typ)
	}
}

// eventVariant compares Evento with one Evento_* schema: a field required
// in every variant must be required in Evento; one required in only some
// (valor, extra) is optional in Evento and required by its doc comment.
func (c *schemaComparer) eventVariant(path string, s map[string]any, ev, extra reflect.Type, all map[string]map[string]any) {
	requiredAll := map[string]int{}
	variants := 0
	for name, v := range all {
		if strings.HasPrefix(name, "Evento_") {
			variants++
			for _, r := range asList(v["required"]) {
				requiredAll[r.(string)]++
			}
		}
	}
	c.object(path, s, ev, func(f goField, required, null bool) {
		fp := path + "." + f.name
		everywhere := requiredAll[f.name] == variants
		switch {
		case everywhere && f.optional:
			c.errorf("%s: required in every event type, omitempty in Evento", fp)
		case !everywhere && !f.optional:
			c.errorf("%s: optional in some event types, always sent by Evento", fp)
		}
		if null && !nilable(f.typ) {
			c.errorf("%s: may be null, held as %v", fp, f.typ)
		}
	})
	es, _ := c.resolve(props(s)["extra"].(map[string]any))
	c.object(path+".extra", es, extra, nil)
}
