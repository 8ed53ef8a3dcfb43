package server

import (
	"errors"
	"net/http"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
)

var catalogSchema = schema.Object(
	schema.Field("acciones", schema.Array(schema.Object(
		schema.Field("id", schema.Int().Min(1).Max(1_000_000)).Required(),
		schema.Field("nombre", schema.String().Len(1, 256)).Required(),
		schema.Field("tipo_cupon", schema.String().Len(1, 256)).Required(),
		schema.Field("costo_envio_mxn", schema.Money().Range(0, 100_000_000_000)).Required(),
		schema.Field("descuento_max_mxn", schema.Money().Range(0, 100_000_000_000)),
		schema.Field("descuento_pct", schema.Number().Range(0, 100)),
		schema.Field("canales", schema.Array(schema.String().Len(1, 256)).Items(0, 100)),
		schema.Field("activa", schema.Bool()),
		schema.Field("categorias", schema.Array(schema.String().Len(1, 256)).Items(1, 64)),
	)).Items(0, 1000)).Required(),
)

// viewCatalog is the catalog as the API shows it (money in MXN).
func viewCatalog(c *engine.Catalog) client.CatalogoRespuesta {
	v := client.CatalogoRespuesta{Acciones: []client.AccionCatalogoRespuesta{}, Version: c.Version}
	for _, a := range c.Acciones {
		v.Acciones = append(v.Acciones, client.AccionCatalogoRespuesta{
			ID: a.ID, Nombre: a.Nombre, TipoCupon: a.TipoCupon, CostoEnvioMXN: mxn(a.CostoEnvioCents),
			DescuentoMaxMXN: mxn(a.DescuentoMaxCents), DescuentoPct: a.DescuentoPct, Canales: a.Canales, Activa: a.Activa,
			Categorias: a.Categorias,
		})
	}
	return v
}

func mxn(cents int64) float64 { return float64(cents) / 100 }

func (s *Server) handleGetCatalog(c *call) error {
	cat, err := s.Engine.Campaigns.Catalog(c.tenant.ID)
	if err != nil {
		return err
	}
	c.answer = answer{http.StatusOK, viewCatalog(cat)}
	return nil
}

func (s *Server) handlePutCatalog(c *call) error {
	v, err := decode(c.body, catalogSchema)
	if err != nil {
		return err
	}
	var actions []engine.Action
	seen := map[int]int{}
	var dup []schema.Violation
	for i, it := range v.Field("acciones").Items() {
		a := engine.Action{
			ID: int(it.Field("id").Int()), Nombre: it.Field("nombre").String(), TipoCupon: it.Field("tipo_cupon").String(),
			CostoEnvioCents: it.Field("costo_envio_mxn").Cents(), DescuentoMaxCents: it.Field("descuento_max_mxn").Cents(),
			DescuentoPct: it.Field("descuento_pct").Float(), Activa: true,
		}
		if f := it.Field("activa"); f.Present() {
			a.Activa = f.Bool()
		}
		for _, ch := range it.Field("canales").Items() {
			a.Canales = append(a.Canales, ch.String())
		}
		for _, c := range it.Field("categorias").Items() {
			a.Categorias = append(a.Categorias, c.String())
		}
		if _, ok := seen[a.ID]; ok {
			dup = append(dup, schema.ValueError([]any{"body", "acciones", i, "id"}, "id repetido en el catálogo", a.ID))
		}
		seen[a.ID] = i
		actions = append(actions, a)
	}
	if len(dup) > 0 {
		return &validationError{detail: dup}
	}
	cat, err := s.Engine.Campaigns.ReplaceCatalog(c.tenant.ID, actions, c.now())
	if errors.Is(err, engine.ErrDuplicateAction) {
		return &validationError{detail: []schema.Violation{schema.ValueError([]any{"body", "acciones"}, "id repetido en el catálogo", nil)}}
	}
	if err != nil {
		return err
	}
	c.answer = answer{http.StatusOK, viewCatalog(cat)}
	return nil
}
