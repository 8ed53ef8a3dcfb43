// Package schema is coupond's one strict JSON decoding and validation layer.
// Every endpoint body goes through it, so that all of them reject the same
// things in the same words.
//
// It has three parts:
//
//   - Parse, a strict JSON parser: duplicate object keys, trailing data,
//     invalid UTF-8, lone surrogate escapes and nesting deeper than MaxDepth
//     are errors. Member order is kept and numbers stay as their literal
//     text, so money is converted to cents exactly, never through a float.
//   - A declarative schema (Object, Field, String, Int, Number, Money, Bool,
//     Timestamp, URL, Array, AnyObject, Any) whose Validate reports every
//     violation found, shaped like a pydantic v2 / FastAPI
//     HTTPValidationError item (Violation).
//   - Value, a cheap read-only view of the parsed document with typed
//     accessors (Field, Items, String, Int, Cents, Float, Bool, Time, ...),
//     a canonical JSON rendering (AppendJSON) and a conversion to plain Go
//     values (Any).
//
// JSONSchema renders a schema as JSON Schema (OpenAPI 3.1's dialect), so
// the API's OpenAPI document is generated from the schemas that validate.
//
// Typical handler code:
//
//	var decisionBody = schema.Object(
//		schema.Field("cliente_ref", schema.ClienteRef()).Required(),
//		schema.Field("contexto", schema.Object(
//			schema.Field("canal", schema.String().Len(1, 256)).Required(),
//		)).Required(),
//	)
//
//	v, bad := decisionBody.Decode(body, "body")
//	if len(bad) > 0 {
//		// answer 422 {"detail": bad}
//	}
//	canal := v.Field("contexto").Field("canal").String()
//
// Validation is strict: there is no coercion between JSON types (the string
// "5" is not an integer, 1 is not a boolean). Integral numbers written with a
// fraction or exponent (5.0, 1e2) are accepted as integers.
//
// Schemas are immutable once built: every builder method returns a new
// schema, so compiled schemas can be package-level values shared by all
// goroutines. Values are read-only and safe for concurrent use.
package schema
