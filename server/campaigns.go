package server

import (
	"errors"
	"net/http"

	"github.com/coupond/coupond/client"
	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/server/schema"
)

// campaignSchema: the caps are optional and null is no cap as well, as
// the answer shows it, so a campaign read back can be sent again with its
// caps as they came (a null was 422).
var campaignSchema = schema.Object(
	schema.Field("canal", schema.String().Len(1, 256)).Required(),
	schema.Field("descripcion", schema.String().Len(1, 256)).Required(),
	schema.Field("max_descuento_mxn", schema.Money().Range(0, 100_000_000_000).Nullable()),
	schema.Field("max_envios", schema.Int().Min(0).Nullable()),
)

// viewCampaign is the campaign as the API shows it (money in MXN).
func viewCampaign(c *engine.Campaign) client.CampanaRespuesta {
	v := client.CampanaRespuesta{CampanaID: c.ID, Canal: c.Canal, Descripcion: c.Descripcion, MaxEnvios: c.MaxEnvios, CreadoEn: c.CreadoEn, ActualizadoEn: c.ActualizadoEn}
	if c.MaxDescuentoCents != nil {
		m := mxn(*c.MaxDescuentoCents)
		v.MaxDescuentoMXN = &m
	}
	return v
}

// campanaParam validates the campana_id path parameter.
func campanaParam(c *call) (string, error) {
	return pathParam(c, "campana_id", schema.ID())
}

func (s *Server) handlePutCampaign(c *call) error {
	id, v, err := decodeWith(c, campanaParam, campaignSchema)
	if err != nil {
		return err
	}
	camp := engine.Campaign{ID: id, Canal: v.Field("canal").String(), Descripcion: v.Field("descripcion").String()}
	if f := v.Field("max_descuento_mxn"); f.Present() && !f.IsNull() {
		cents := f.Cents()
		camp.MaxDescuentoCents = &cents
	}
	if f := v.Field("max_envios"); f.Present() && !f.IsNull() {
		n := f.Int()
		camp.MaxEnvios = &n
	}
	saved, err := s.Engine.Campaigns.PutCampaign(c.tenant.ID, camp, c.now())
	if err != nil {
		return err
	}
	c.answer = answer{http.StatusOK, viewCampaign(saved)}
	return nil
}

func (s *Server) handleGetCampaign(c *call) error {
	id, err := campanaParam(c)
	if err != nil {
		return err
	}
	camp, err := s.Engine.Campaigns.Campaign(c.tenant.ID, id)
	if errors.Is(err, engine.ErrNotFound) {
		return errKind(kindNotFound)
	}
	if err != nil {
		return err
	}
	c.answer = answer{http.StatusOK, viewCampaign(camp)}
	return nil
}
