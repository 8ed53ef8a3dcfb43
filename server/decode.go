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
