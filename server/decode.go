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

// pathParam is the path parameter name of c checked against sch: its
// value, or a *validationError (422) whose violations are located at
// ["path", name].
func pathParam(c *call, name string, sch *schema.StringSchema) (string, error) {
	v := c.params.ByName(name)
	if bad := sch.ValidateText(v, "path", name); len(bad) > 0 {
		return "", &validationError{detail: bad}
	}
	return v, nil
}
