package batch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/jsonappend"
)

// resultLine is one line of a result file: the online decision body plus
// cliente_ref, first. Its encoding/json form (without HTML escaping, as the
// API's answers) is what AppendResultLine writes without reflection (a
// 500,000-line job encodes half a million).
type resultLine struct {
	ClienteRef string `json:"cliente_ref"`
	*engine.Decision
}

// AppendResultLine appends the result line of customer ref's decision d
// (the online decision body plus cliente_ref, one JSON object, no newline)
// to dst: byte for byte what jsonappend.Marshal makes of a resultLine. The
// body is engine.Decision.AppendJSON's, so a line and an online answer
// cannot drift apart. It panics on a decision encoding/json rejects (a NaN
// or infinite number, a time it cannot write), which the decider never
// makes.
func AppendResultLine(dst []byte, ref string, d *engine.Decision) []byte {
	n0 := len(dst)
	dst = append(dst, `{"cliente_ref":`...)
	dst = jsonappend.String(dst, ref)
	body := len(dst)
	dst, ok := d.AppendJSON(dst)
	if !ok {
		line, err := jsonappend.Marshal(resultLine{ClienteRef: ref, Decision: d})
		if err != nil {
			panic(fmt.Sprintf("batch: result line of %q: %v", ref, err))
		}
		return append(dst[:n0], line...)
	}
	dst[body] = ',' // the body's "{": cliente_ref comes first
	return dst
}

// detalleKey opens a line's detalle member. Lines are written by
// AppendResultLine: no whitespace, cliente_ref first. The bytes `,"` with a
// bare quote never occur inside a JSON string (a quote there is escaped),
// so these bytes are the member's key wherever they occur.
var detalleKey = []byte(`,"detalle":`)

// StripDetalle appends result line to dst without its detalle member, the
// rest byte for byte (a line without detalle is appended as it is): the
// line as a caller without the scope explicar:leer gets it. ok is false
// when the line's detalle is not an object that ends within the line.
func StripDetalle(dst, line []byte) (_ []byte, ok bool) {
	i := bytes.Index(line, detalleKey)
	if i < 0 {
		return append(dst, line...), true
	}
	v := line[i+len(detalleKey):]
	n := objectEnd(v)
	if n < 0 {
		return dst, false
	}
	dst = append(dst, line[:i]...)
	return append(dst, v[n:]...), true
}

// objectEnd returns the length of the JSON object at the start of b, or -1
// when b does not start with one or it does not end within b. Brackets
// inside strings do not count.
func objectEnd(b []byte) int {
	if len(b) == 0 || b[0] != '{' {
		return -1
	}
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++ // the escaped byte
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// StripDetalleReader returns a reader of the result lines read from r
// without their detalle (StripDetalle), each ending in '\n'. It holds one
// line at a time (at most MaxResultLine bytes). A line longer than that,
// or whose detalle does not end, is an error wrapping ErrResultDamaged;
// r's errors are returned as they are.
func StripDetalleReader(r io.Reader) io.Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxResultLine+1)
	sc.Split(scanLF)
	return &detalleStripper{sc: sc}
}

type detalleStripper struct {
	sc   *bufio.Scanner
	line []byte // the current stripped line
	out  []byte // what of line is not read yet
	err  error  // sticky, once the lines end
}

func (s *detalleStripper) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if !s.sc.Scan() {
			s.err = s.sc.Err()
			if errors.Is(s.err, bufio.ErrTooLong) {
				s.err = fmt.Errorf("%w: a line is longer than %d bytes", ErrResultDamaged, MaxResultLine)
			} else if s.err == nil {
				s.err = io.EOF
			}
			continue
		}
		line, ok := StripDetalle(s.line[:0], s.sc.Bytes())
		if !ok {
			s.err = fmt.Errorf("%w: a line's detalle does not end", ErrResultDamaged)
			continue
		}
		s.line = append(line, '\n')
		s.out = s.line
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
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

// errLinePanic is the writer's error after encoding a line panicked.
var errLinePanic = errors.New("batch: encoding a result line panicked")

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
			line = lw.write(line, block)
		}
		clear(block)
		select {
		case lw.free <- block[:0]:
		default:
		}
	}
}

// write encodes and writes block's lines, line being scratch memory. A
// panic (AppendResultLine's, on a decision it cannot encode) becomes the
// writer's error, as runSafe makes it the job's: this goroutine is out of
// runSafe's reach, and a panic here ended the process.
func (lw *lineWriter) write(line []byte, block []lineItem) []byte {
	setErr := func(err error) {
		lw.mu.Lock()
		lw.err = err
		lw.mu.Unlock()
	}
	defer func() {
		if p := recover(); p != nil {
			setErr(fmt.Errorf("%w: %v", errLinePanic, p))
		}
	}()
	for _, it := range block {
		line = AppendResultLine(line[:0], it.ref, it.d)
		if err := lw.w.WriteLine(line); err != nil {
			setErr(err)
			break
		}
	}
	return line
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
