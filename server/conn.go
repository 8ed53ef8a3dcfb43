package server

import (
	"context"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// HTTPConfig bounds what a client can hold of the server (contract section
// 8). The zero value of a field means its default.
type HTTPConfig struct {
	// ReadHeaderTimeout: a request's headers must arrive within it (5 s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout: a whole request, body included, must arrive within it
	// from its first byte (30 s); then the connection is closed. It binds
	// every client, authenticated or not.
	ReadTimeout time.Duration
	// IdleTimeout: an idle keep-alive connection is closed after it (120 s).
	IdleTimeout time.Duration
	// WriteStallTimeout: a write of an answer that makes no progress within
	// it (the client stopped reading) closes the connection (30 s). A slow
	// client that keeps reading is not cut off, however long the answer.
	WriteStallTimeout time.Duration
	// MaxConns caps the connections open at once (2048); past it the
	// listener stops accepting until one closes, and new clients wait in the
	// kernel's backlog. At the cap the keep-alive connection idle longest
	// is closed (or, none idle, the next to go idle), as net/http's
	// Shutdown closes idle connections: a new client waits for a request to
	// end, not for idle clients' IdleTimeout.
	MaxConns int
}

// Defaults of HTTPConfig.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultWriteStallTimeout = 30 * time.Second
	DefaultMaxConns          = 2048
	// MaxHeaderBytes bounds a request's header block: 32 KiB holds any
	// request of the API (a token, an Idempotency-Key, a proxy's headers)
	// many times over, and with DefaultMaxConns connections holds the
	// server's header memory near 70 MB (net/http's default, 1 MB, let
	// clients without a token pin about 2 GB). Past it net/http answers
	// 431 and closes the connection.
	MaxHeaderBytes = 32 << 10
)

func (c HTTPConfig) withDefaults() HTTPConfig {
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.WriteStallTimeout <= 0 {
		c.WriteStallTimeout = DefaultWriteStallTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	return c
}

// HTTPServer returns the http.Server that serves s with the limits of cfg,
// and ln wrapped to hold them: at most cfg.MaxConns open connections, each
// write of an answer bounded by cfg.WriteStallTimeout, and each request's
// framing watched for Content-Length together with
// Transfer-Encoding (net/http drops the Content-Length of such a request
// and reads it as chunked; the contract wants it refused with 400).
// Serve the returned server on the returned listener.
func (s *Server) HTTPServer(ln net.Listener, cfg HTTPConfig) (*http.Server, net.Listener) {
	cfg = cfg.withDefaults()
	srv := limitedServer(s, cfg, s.log)
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if fc, ok := c.(*framingConn); ok {
			return context.WithValue(ctx, connInfoKey{}, &fc.info)
		}
		return ctx
	}
	l := &limitListener{Listener: ln, sem: make(chan struct{}, cfg.MaxConns), done: make(chan struct{}),
		writeStall: cfg.WriteStallTimeout, now: s.Now, canned: s.logCanned}
	srv.ConnState = l.idle.track
	return srv, l
}

// HTTPServerFor returns an http.Server that serves h, the handler of a
// listener other than the API's (the operator console), with the API's
// limits of cfg: the same timeouts, header cap and write stall bound, and
// at most cfg.MaxConns connections of its own. Only the API's framing
// watch and JSON rewrite of net/http's own answers are left out: a request
// with both Content-Length and Transfer-Encoding is read as net/http reads
// it, and net/http's answers (431, 400, …) stay its plain text. log gets
// net/http's own reports (HTTPErrorLog). Serve the returned server on the
// returned listener.
func HTTPServerFor(h http.Handler, ln net.Listener, cfg HTTPConfig, log zerolog.Logger) (*http.Server, net.Listener) {
	cfg = cfg.withDefaults()
	srv := limitedServer(h, cfg, log)
	l := &limitListener{Listener: ln, sem: make(chan struct{}, cfg.MaxConns), done: make(chan struct{}),
		writeStall: cfg.WriteStallTimeout, plain: true}
	srv.ConnState = l.idle.track
	return srv, l
}

// limitedServer is the http.Server of h with cfg's timeouts (cfg has its
// defaults) and the header cap.
func limitedServer(h http.Handler, cfg HTTPConfig, log zerolog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		// "OPTIONS *" goes to the handler (the API's router: 404
		// no_encontrado) like any other OPTIONS, rather than net/http's
		// 200; it also keeps every API request passing through the
		// pipeline, which smuggled counts on.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     HTTPErrorLog(log),
	}
}

// HTTPErrorLog is the ErrorLog of an http.Server: what net/http itself
// reports (accept errors when descriptors run out, a handler's misuse of
// the ResponseWriter) goes to l as a warn line with source "net/http",
// rather than as a plain line on stderr among the JSON ones.
func HTTPErrorLog(l zerolog.Logger) *log.Logger {
	return log.New(httpErrorWriter{l}, "", 0)
}

type httpErrorWriter struct{ log zerolog.Logger }

func (w httpErrorWriter) Write(p []byte) (int, error) {
	w.log.Warn().Str("source", "net/http").Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// limitListener accepts at most cap(sem) connections open at once (as
// golang.org/x/net/netutil.LimitListener) and wraps each in a framingConn.
// At the cap it closes an idle keep-alive connection to make the next place
// (idle, which the server's ConnState feeds).
type limitListener struct {
	net.Listener
	sem        chan struct{}
	idle       idleConns
	closeOnce  sync.Once
	done       chan struct{}
	writeStall time.Duration
	now        func() time.Time
	// canned logs net/http's own answer to a request whose head began
	// arriving at the given time (Server.logCanned).
	canned func(cannedAnswer, time.Time)
	// plain: not the API's listener (HTTPServerFor); its connections
	// neither watch the framing nor rewrite net/http's answers.
	plain bool
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	default: // at the cap: an idle connection makes room
		l.idle.wait(true)
		select {
		case l.sem <- struct{}{}:
			l.idle.wait(false)
		case <-l.done:
			l.idle.wait(false)
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	boundUnsent(c)
	fc := &framingConn{Conn: c, release: func() { <-l.sem }, writeStall: l.writeStall, now: l.now, canned: l.canned, plain: l.plain}
	fc.info.bad.Store(-1)
	if l.plain {
		fc.st = stDead
		return fc, nil
	}
	fc.headAt = l.now()
	return fc, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// idleConns are a listener's connections net/http holds idle between
// requests (keep-alive), by when each went idle, and whether Accept waits
// for a place at the cap (it asks for the next place as soon as it has
// handed out the last, before a client comes). While it waits, the
// connection idle longest is closed, and so is any that goes idle, until
// Accept has its place: a client in the kernel's backlog then waits for a
// request to end, not for an idle client's IdleTimeout. Closing an idle
// connection is what net/http's own IdleTimeout and Shutdown do; a request
// sent on it just as it closes finds it closed, as at IdleTimeout.
type idleConns struct {
	mu      sync.Mutex
	since   map[net.Conn]time.Time
	waiting bool
}

// track is the server's ConnState: it records c's idle spells.
func (ic *idleConns) track(c net.Conn, st http.ConnState) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if st != http.StateIdle {
		delete(ic.since, c)
		return
	}
	if ic.waiting {
		c.Close()
		return
	}
	if ic.since == nil {
		ic.since = make(map[net.Conn]time.Time)
	}
	ic.since[c] = time.Now()
}

// wait records whether Accept waits at the cap; as it starts waiting, the
// connection idle longest, if any, is closed.
func (ic *idleConns) wait(waiting bool) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.waiting = waiting
	if !waiting {
		return
	}
	var oldest net.Conn
	var at time.Time
	for c, t := range ic.since {
		if oldest == nil || t.Before(at) {
			oldest, at = c, t
		}
	}
	if oldest != nil {
		delete(ic.since, oldest)
		oldest.Close()
	}
}

// connInfo is what the request pipeline learns about its connection: the
// index of the first request whose head carried both Content-Length and
// Transfer-Encoding (-1: none), and how many requests it has served.
// served is only touched by the connection's serving goroutine (HTTP/1.1
// serves a connection's requests one after the other).
type connInfo struct {
	bad    atomic.Int64
	served int64
}

type connInfoKey struct{}

// smuggled reports whether the request r carried both Content-Length and
// Transfer-Encoding, and counts it. Every request the pipeline serves must
// call it exactly once.
func smuggled(r *http.Request) bool {
	ci, _ := r.Context().Value(connInfoKey{}).(*connInfo)
	if ci == nil {
		return false
	}
	i := ci.served
	ci.served++
	return ci.bad.Load() == i
}

// framingConn watches the bytes the server reads for request heads that
// carry both Content-Length and Transfer-Encoding. It follows the stream
// (headers, then a Content-Length body or chunks) with a small state
// machine that never buffers more than a header name; at the first such
// head, or at anything it cannot follow, it stops watching (net/http closes
// connections whose framing broke, and the pipeline closes the one it
// refuses).
type framingConn struct {
	net.Conn
	info        connInfo
	release     func()
	releaseOnce sync.Once
	writeStall  time.Duration
	now         func() time.Time
	canned      func(cannedAnswer, time.Time)
	// headAt is when the current request head began to arrive (at accept
	// until the first one does): the start of a canned answer's latency.
	headAt time.Time
	// plain: write net/http's own answers as they are (HTTPServerFor).
	plain bool

	st       frameState
	heads    int64  // request heads begun so far
	lineLen  int    // bytes of the current trailer line (or chunk end) seen
	name     []byte // current header name, lower-cased, at most maxName bytes
	inName   bool
	hasCL    bool
	hasTE    bool
	clWant   bool // collecting the Content-Length value
	cl       int64
	clBad    bool
	remain   int64 // body or chunk bytes still to skip
	chunkHex bool  // reading a chunk size's hex digits (false after ';')
}

type frameState uint8

const (
	stIdle        frameState = iota // between requests
	stRequestLine                   // in the request line
	stLineStart                     // at the start of a header line (or the blank line ending the head)
	stHeaderLine                    // in a header line
	stBody                          // skipping remain bytes of a Content-Length body
	stChunkSize                     // in a chunk-size line
	stChunkData                     // skipping remain bytes of chunk data
	stChunkEnd                      // the CRLF after chunk data
	stTrailer                       // trailer lines after the last chunk
	stDead                          // stopped watching
)

const maxName = 32

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.st != stDead {
		c.scan(p[:n])
	}
	return n, err
}

// writeChunk is the most Write hands the connection under one deadline.
const writeChunk = 16 << 10

// Write writes b in chunks of at most writeChunk, each of which must be
// taken by the client within writeStall: a client that stops reading fails
// the write (and net/http closes the connection) instead of holding it for
// ever, while a slow one that keeps reading gets any length of answer
// (boundUnsent keeps the kernel from holding a write back until megabytes
// have drained; over loopback one reading 8 KB/s is served, 4 KB/s is cut:
// the receiver's window then opens too rarely).
// net/http sets no write deadline of its own (the server has no
// WriteTimeout), so these are the only ones.
//
// On the API's listener, net/http's own answers to a request it could not
// read are written as the API's JSON error (jsonCanned) and get their
// access log line, as the pipeline's answers do, whether or not the client
// took them; on another (plain) they go out as net/http wrote them.
func (c *framingConn) Write(b []byte) (n int, err error) {
	if c.plain {
		return c.write(b)
	}
	if j, a, ok := jsonCanned(b); ok {
		_, err := c.write(j)
		if c.canned != nil {
			c.canned(a, c.headAt)
		}
		if err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.write(b)
}

// write writes b in chunks of at most writeChunk under writeStall each.
func (c *framingConn) write(b []byte) (n int, err error) {
	for len(b) > 0 {
		chunk := b[:min(len(b), writeChunk)]
		c.Conn.SetWriteDeadline(time.Now().Add(c.writeStall))
		m, err := c.Conn.Write(chunk)
		n += m
		if err != nil {
			return n, err
		}
		b = b[m:]
	}
	return n, nil
}

func (c *framingConn) Close() error {
	err := c.Conn.Close()
	c.releaseOnce.Do(c.release)
	return err
}

// scan advances the state machine over b.
func (c *framingConn) scan(b []byte) {
	for i := 0; i < len(b) && c.st != stDead; i++ {
		ch := b[i]
		switch c.st {
		case stBody, stChunkData:
			skip := min(c.remain, int64(len(b)-i))
			c.remain -= skip
			i += int(skip) - 1
			if c.remain == 0 {
				if c.st == stBody {
					c.st = stIdle
				} else {
					c.st, c.lineLen = stChunkEnd, 0
				}
			}
		case stIdle, stRequestLine, stLineStart, stHeaderLine:
			c.headByte(ch)
		case stChunkSize:
			c.chunkSizeByte(ch)
		case stChunkEnd:
			switch {
			case ch == '\r' && c.lineLen == 0:
				c.lineLen++
			case ch == '\n':
				c.st, c.remain, c.chunkHex = stChunkSize, 0, true
			default:
				c.st = stDead
			}
		case stTrailer:
			if ch == '\n' {
				if c.lineLen == 0 {
					c.st = stIdle // end of the chunked body
				}
				c.lineLen = 0
			} else if ch != '\r' {
				c.lineLen++
			}
		}
	}
}

// headByte follows the request line and header lines.
func (c *framingConn) headByte(ch byte) {
	switch c.st {
	case stIdle:
		if ch != '\r' && ch != '\n' { // net/http skips blank lines before a request
			c.beginHead()
			c.st = stRequestLine
		}
	case stRequestLine:
		if ch == '\n' {
			c.st = stLineStart
		}
	case stLineStart:
		switch ch {
		case '\r':
		case '\n':
			c.endHead()
		default:
			c.st, c.inName, c.clWant = stHeaderLine, true, false
			c.name = c.name[:0]
			c.headerByte(ch)
		}
	case stHeaderLine:
		if ch == '\n' {
			c.st = stLineStart
			return
		}
		c.headerByte(ch)
	}
}

// headerByte takes one byte of a header line other than its LF.
func (c *framingConn) headerByte(ch byte) {
	switch {
	case c.inName && ch == ':':
		c.inName = false
		switch string(c.name) {
		case "content-length":
			c.hasCL, c.clWant = true, true
		case "transfer-encoding":
			c.hasTE = true
		}
	case c.inName:
		if len(c.name) < maxName {
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			c.name = append(c.name, ch)
		}
	case c.clWant:
		switch {
		case ch == ' ' || ch == '\t' || ch == '\r':
		case '0' <= ch && ch <= '9' && c.cl < 1<<50:
			c.cl = c.cl*10 + int64(ch-'0')
		default:
			c.clBad = true
		}
	}
}

func (c *framingConn) beginHead() {
	c.heads++
	if c.now != nil {
		c.headAt = c.now()
	}
	c.hasCL, c.hasTE, c.clWant, c.cl, c.clBad = false, false, false, 0, false
}

// endHead decides what follows the head just ended.
func (c *framingConn) endHead() {
	switch {
	case c.hasCL && c.hasTE:
		c.info.bad.CompareAndSwap(-1, c.heads-1)
		c.st = stDead
	case c.hasTE:
		c.st, c.remain, c.chunkHex = stChunkSize, 0, true
	case c.clBad:
		c.st = stDead // net/http refuses it and closes the connection
	case c.cl > 0:
		c.st, c.remain = stBody, c.cl
	default:
		c.st = stIdle
	}
}

// chunkSizeByte follows a chunk-size line: hex digits, optional extensions.
func (c *framingConn) chunkSizeByte(ch byte) {
	switch {
	case ch == '\n':
		switch {
		case c.remain > 0:
			c.st = stChunkData
		default:
			c.st, c.lineLen = stTrailer, 0
		}
	case ch == '\r' || !c.chunkHex:
	case ch == ';' || ch == ' ' || ch == '\t':
		c.chunkHex = false
	default:
		v, ok := hexVal(ch)
		if !ok || c.remain > 1<<50 {
			c.st = stDead
			return
		}
		c.remain = c.remain<<4 | int64(v)
	}
}

func hexVal(ch byte) (byte, bool) {
	switch {
	case '0' <= ch && ch <= '9':
		return ch - '0', true
	case 'a' <= ch && ch <= 'f':
		return ch - 'a' + 10, true
	case 'A' <= ch && ch <= 'F':
		return ch - 'A' + 10, true
	}
	return 0, false
}
