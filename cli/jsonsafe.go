package cli

import (
	"encoding/json"
	"math"
	"reflect"
)

// jsonSafe returns v as generic JSON values with NaN and ±Inf replaced by
// null, which encoding/json refuses to encode.
func jsonSafe(v any) any {
	data, err := json.Marshal(nanToNull(reflect.ValueOf(v)))
	if err != nil {
		return v
	}
	var out any
	json.Unmarshal(data, &out)
	return out
}

func nanToNull(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return nanToNull(v.Elem())
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return f
	case reflect.Struct:
		m := map[string]any{}
		t := v.Type()
		for i := 0; i < v.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if tag := f.Tag.Get("json"); tag != "" {
				if tag == "-" {
					continue
				}
				for j := 0; j < len(tag); j++ {
					if tag[j] == ',' {
						tag = tag[:j]
						break
					}
				}
				if tag != "" {
					name = tag
				}
			}
			m[name] = nanToNull(v.Field(i))
		}
		return m
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return []any{}
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = nanToNull(v.Index(i))
		}
		return out
	case reflect.Map:
		m := map[string]any{}
		for _, k := range v.MapKeys() {
			m[toString(k)] = nanToNull(v.MapIndex(k))
		}
		return m
	default:
		return v.Interface()
	}
}

func toString(k reflect.Value) string {
	b, _ := json.Marshal(k.Interface())
	if k.Kind() == reflect.String {
		return k.String()
	}
	return string(b)
}
