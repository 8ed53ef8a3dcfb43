package schema

import "testing"

// compraCat is the schema of a COMPRA_CAT event (spec, Events), the
// benchmark's and the fuzzer's example of a real body.
var compraCat = Object(
	Field("event_id", ID()).Required(),
	Field("cliente_ref", ClienteRef()).Required(),
	Field("ts", Timestamp()).Required(),
	Field("decision_id", ID().Nullable()),
	Field("tipo", String().Enum("COMPRA_CAT", "CUPON_RECIBIDO", "CUPON_REDIMIDO", "CUPON_CADUCADO", "BAJA", "ALTA")).Required(),
	Field("clave", String().Len(1, 256)).Required(),
	Field("valor", Money().Range(0, 100_000_000_000)).Required(),
	Field("extra", Object(
		Field("ticket_id", ID()).Required(),
		Field("margen", Money().Range(-100_000_000_000, 100_000_000_000)).Required(),
		Field("cantidad", Number().Min(0)),
		Field("tienda", String().Len(1, 256).Nullable()),
		Field("canal", String().Len(1, 256).Nullable()),
		Field("ticket_total", Money().Range(0, 100_000_000_000).Nullable()),
	)).Required(),
)

// purchaseEvent is a typical COMPRA_CAT event (about 350 bytes).
const purchaseEvent = `{
  "event_id": "evt-2024-05-01-000123456",
  "cliente_ref": "c9f1a2b3c4d5e6f7a8b9c0d1",
  "ts": "2024-05-01T12:34:56.789-06:00",
  "decision_id": null,
  "tipo": "COMPRA_CAT",
  "clave": "abarrotes",
  "valor": 1234.50,
  "extra": {"ticket_id": "T-000987654", "margen": 234.15, "cantidad": 3, "tienda": "MTY-012", "canal": "tienda", "ticket_total": 2999.99}
}`

func BenchmarkParseValidateEvent(b *testing.B) {
	data := []byte(purchaseEvent)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		v, bad := compraCat.Decode(data, "body")
		if len(bad) != 0 || v.Field("extra").Field("margen").Cents() != 23415 {
			b.Fatalf("bad = %v", bad)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	data := []byte(purchaseEvent)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonicalJSON(b *testing.B) {
	v, err := Parse([]byte(purchaseEvent))
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = v.AppendJSON(buf[:0])
	}
}
