package server

import "github.com/coupond/coupond/server/schema"

// decode parses body strictly and validates it against sch; every
// violation found is returned at once as a 422.
func decode(body []byte, sch *schema.ObjectSchema) (schema.Value, error) {
	v, errs := sch.Decode(body, "body")
	if len(errs) > 0 {
		return v, &validationError{detail: errs}
	}
	return v, nil
}

// decodeWith checks the request part part reads (a path parameter or a
// header: its value, or a *validationError), then decodes the body with
// sch; one 422 lists the violations of both, the part's first.
func decodeWith(c *call, part func(*call) (string, error), sch *schema.ObjectSchema) (string, schema.Value, error) {
	p, partErr := part(c)
	v, err := decode(c.body, sch)
	return p, v, joinValidation(partErr, err)
}
