package api

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRechazoString: a rejection printed with %v or %+v (the README's
// client example wraps one with %+v) shows its event_id and campo, not the
// addresses of their pointers, and leaves out the ones it lacks.
func TestRechazoString(t *testing.T) {
	id, campo := "tk-1-bad", "extra.margen"
	tests := []struct {
		name string
		r    Rechazo
		want string
	}{
		{"every member", Rechazo{Indice: 3, EventID: &id, Codigo: "esquema_invalido", Campo: &campo, Mensaje: "Field required"},
			`event 3 "tk-1-bad": esquema_invalido: Field required (campo extra.margen)`},
		{"no event_id", Rechazo{Indice: 0, Codigo: "esquema_invalido", Campo: &campo, Mensaje: "Field required"},
			`event 0: esquema_invalido: Field required (campo extra.margen)`},
		{"no campo", Rechazo{Indice: 7, EventID: &id, Codigo: "esquema_invalido", Mensaje: "cada evento debe ser un objeto JSON"},
			`event 7 "tk-1-bad": esquema_invalido: cada evento debe ser un objeto JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := []string{fmt.Sprintf("%v", tt.r), fmt.Sprintf("%+v", tt.r), fmt.Sprint(&tt.r)}
			if diff := cmp.Diff([]string{tt.want, tt.want, tt.want}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
