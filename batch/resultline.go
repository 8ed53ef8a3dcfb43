package batch

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coupond/coupond/engine"
)

// resultLine is one line of a result file: the online decision body plus
// cliente_ref. AppendResultLine writes the same bytes as marshalLine (an
// encoding/json Encoder without HTML escaping, as the API's answers), without
// reflection (a 500,000-line job marshals half a million).
type resultLine struct {
	ClienteRef string `json:"cliente_ref"`
	*engine.Decision
}

// AppendResultLine appends the result line of customer ref's decision d
// (the online decision body plus cliente_ref, one JSON object, no newline)
// to dst: byte for byte what marshalLine makes of it.
func AppendResultLine(dst []byte, ref string, d *engine.Decision) []byte {
	if d.Detalle != nil || d.CaducaEn.Year() < 0 || d.CaducaEn.Year() > 9999 ||
		math.IsInf(d.Propension, 0) || math.IsNaN(d.Propension) {
		// Rare shapes (explained decisions, out-of-range values): the
		// reference encoder.
		b, err := marshalLine(resultLine{ClienteRef: ref, Decision: d})
		if err != nil {
			panic(err) // a Decision with a finite propension always marshals
		}
		return append(dst, b...)
	}
	dst = append(dst, `{"cliente_ref":`...)
	dst = appendJSONString(dst, ref)
	dst = append(dst, `,"decision_id":`...)
	dst = appendJSONString(dst, d.DecisionID)
	dst = append(dst, `,"accion":`...)
	dst = strconv.AppendInt(dst, int64(d.Accion), 10)
	dst = append(dst, `,"accion_nombre":`...)
	dst = appendJSONString(dst, d.AccionNombre)
	dst = append(dst, `,"propension":`...)
	dst = appendJSONFloat(dst, d.Propension)
	dst = append(dst, `,"politica_version":`...)
	dst = appendJSONString(dst, d.PoliticaVersion)
	dst = append(dst, `,"explorado":`...)
	dst = strconv.AppendBool(dst, d.Explorado)
	dst = append(dst, `,"en_control":`...)
	dst = strconv.AppendBool(dst, d.EnControl)
	dst = append(dst, `,"en_respaldo":`...)
	dst = strconv.AppendBool(dst, d.EnRespaldo)
	dst = append(dst, `,"caduca_en":"`...)
	dst = d.CaducaEn.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","motivo":`...)
	dst = appendJSONString(dst, d.Motivo)
	if d.EnSombra != nil {
		dst = append(dst, `,"en_sombra":`...)
		dst = strconv.AppendBool(dst, *d.EnSombra)
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// marshalLine is json.Marshal without HTML escaping: "<", ">" and "&" are
// written as they are, as in every JSON answer of the API.
func marshalLine(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// appendJSONString appends s as encoding/json does without HTML escaping:
// U+2028 and U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendJSONFloat appends a finite float64 as encoding/json does (ES6
// number formatting).
func appendJSONFloat(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// lineWriter encodes and writes result lines on its own goroutine, so that
// a job's decider does not wait for JSON and compression: lines go over in
// blocks of lineBlock, in order.
type lineWriter struct {
	w      *ResultWriter
	blocks chan []lineItem
	free   chan []lineItem
	cur    []lineItem
	done   chan struct{}

	mu     sync.Mutex
	err    error
	closed bool
}

type lineItem struct {
	ref string
	d   *engine.Decision
}

const lineBlock = 256

func newLineWriter(w *ResultWriter) *lineWriter {
	lw := &lineWriter{w: w, blocks: make(chan []lineItem, 8), free: make(chan []lineItem, 10), done: make(chan struct{})}
	lw.cur = make([]lineItem, 0, lineBlock)
	go lw.loop()
	return lw
}

func (lw *lineWriter) loop() {
	defer close(lw.done)
	var line []byte
	for block := range lw.blocks {
		if lw.failed() == nil {
			for _, it := range block {
				line = AppendResultLine(line[:0], it.ref, it.d)
				if err := lw.w.WriteLine(line); err != nil {
					lw.mu.Lock()
					lw.err = err
					lw.mu.Unlock()
					break
				}
			}
		}
		clear(block)
		select {
		case lw.free <- block[:0]:
		default:
		}
	}
}

func (lw *lineWriter) failed() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.err
}

// add queues the line of ref's decision d; it returns an earlier write
// error, if any.
func (lw *lineWriter) add(ref string, d *engine.Decision) error {
	lw.cur = append(lw.cur, lineItem{ref, d})
	if len(lw.cur) == lineBlock {
		lw.blocks <- lw.cur
		select {
		case lw.cur = <-lw.free:
		default:
			lw.cur = make([]lineItem, 0, lineBlock)
		}
		return lw.failed()
	}
	return nil
}

// close writes the queued lines, stops the goroutine and returns the first
// write error. Later calls return the same error.
func (lw *lineWriter) close() error {
	if !lw.closed {
		lw.closed = true
		if len(lw.cur) > 0 {
			lw.blocks <- lw.cur
			lw.cur = nil
		}
		close(lw.blocks)
		<-lw.done
	}
	return lw.failed()
}
