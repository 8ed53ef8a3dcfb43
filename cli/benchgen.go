package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// inParallel runs fn(w) for each worker w in [0, n) in its own goroutine
// and returns when all have returned.
func inParallel(n int, fn func(w int)) {
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			fn(w)
		}(w)
	}
	wg.Wait()
}

// openLoop is the decision generator: arrivals at a fixed rate whatever the
// server does (open loop), each timed from its scheduled send time, so a
// slow answer shows as latency of the requests queued behind it instead of
// as fewer requests (no coordinated omission).
type openLoop struct {
	rate     int
	duration time.Duration
	workers  int // requests in flight at most; arrivals beyond wait in a queue and their wait counts
	// sender returns one worker's send function, which makes request n; an
	// error or a status other than 200 counts as failed. close ends it.
	sender func() (send func(n int) (status int, err error), close func())
}

// stepResult is what one rate step measured.
type stepResult struct {
	rate                int
	ok, failed, dropped int64
	elapsed             time.Duration
	lat                 []time.Duration // sorted, from the scheduled send time
	// behind counts arrivals the dispatcher issued more than 1 ms after their
	// scheduled time; maxBehind is the worst lag. Latency is still measured
	// from the schedule, so a late generator inflates the figures, never
	// hides time: a high count means the generator, not only the server, is
	// saturated.
	behind    int64
	maxBehind time.Duration
	server    cpuSample // CPU of the measured server process over the step
	gen       cpuSample // CPU of this process (the generator) over the step
	fsyncs    int64     // WAL fsyncs of the server over the step, 0 when unknown
}

func (r *stepResult) achieved() float64 { return float64(r.ok) / r.elapsed.Seconds() }

func (r *stepResult) q(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
}

// cpuPerReq is the sample's CPU time per request answered 200 (failed
// requests' CPU is charged to the successful ones), 0 when unknown or
// when none succeeded.
func (r *stepResult) cpuPerReq(s cpuSample) time.Duration {
	if !s.known || r.ok == 0 {
		return 0
	}
	return s.cpu / time.Duration(r.ok)
}

// run sends for the duration and returns what it measured. pid is the
// server process whose CPU is sampled (0: not sampled).
func (g openLoop) run(ctx context.Context, pid int) stepResult {
	type job struct {
		n  int
		at time.Time
	}
	queue := make(chan job, g.rate*2+g.workers)
	res := stepResult{rate: g.rate}
	var ok, failed, dropped atomic.Int64
	lats := make([][]time.Duration, g.workers)
	var wg sync.WaitGroup
	for w := 0; w < g.workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			send, closeSend := g.sender()
			defer closeSend()
			// A size hint only (capped: an hour-long run grows the slice).
			mine := make([]time.Duration, 0, min(int(g.duration.Seconds()+1)*g.rate/g.workers+16, 1<<20))
			for j := range queue {
				st, err := send(j.n)
				mine = append(mine, time.Since(j.at))
				if err != nil || st != 200 {
					failed.Add(1)
					continue
				}
				ok.Add(1)
			}
			lats[w] = mine
		}(w)
	}
	srv0, gen0 := readCPU(pid), readCPU(os.Getpid())
	// The dispatcher owns its thread: preciseSleep blocks it, and one more P
	// keeps the workers on every core while it sleeps.
	runtime.LockOSThread()
	prev := runtime.GOMAXPROCS(runtime.NumCPU() + 1)
	start := time.Now()
	interval := time.Second / time.Duration(g.rate)
	total := int(g.duration / interval)
	for n := 0; n < total && ctx.Err() == nil; n++ {
		at := start.Add(time.Duration(n) * interval)
		if d := time.Until(at); d > 0 {
			preciseSleep(d)
		} else if -d > time.Millisecond {
			res.behind++
			res.maxBehind = max(res.maxBehind, -d)
		}
		select {
		case queue <- job{n: n, at: at}:
		default:
			dropped.Add(1) // the queue holds two seconds of arrivals: the server is far behind
		}
	}
	runtime.GOMAXPROCS(prev)
	runtime.UnlockOSThread()
	close(queue)
	wg.Wait()
	res.elapsed = time.Since(start)
	srv1, gen1 := readCPU(pid), readCPU(os.Getpid())
	res.server, res.gen = srv1.minus(srv0), gen1.minus(gen0)
	res.ok, res.failed, res.dropped = ok.Load(), failed.Load(), dropped.Load()
	for _, l := range lats {
		res.lat = append(res.lat, l...)
	}
	sort.Slice(res.lat, func(i, j int) bool { return res.lat[i] < res.lat[j] })
	return res
}

// cpuSample is a process's user+system CPU time from /proc/PID/stat.
type cpuSample struct {
	cpu   time.Duration
	known bool
}

func (a cpuSample) minus(b cpuSample) cpuSample {
	return cpuSample{cpu: a.cpu - b.cpu, known: a.known && b.known}
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc.
const clockTicks = 100

// readCPU reads utime+stime of process pid (every thread); unknown when pid
// is 0 or /proc is missing.
func readCPU(pid int) cpuSample {
	if pid <= 0 {
		return cpuSample{}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return cpuSample{}
	}
	// The command name (field 2) may hold spaces: count fields after ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return cpuSample{}
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return cpuSample{}
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return cpuSample{}
	}
	return cpuSample{cpu: time.Duration(ut+st) * time.Second / clockTicks, known: true}
}

// readRSSPeak reads VmHWM (peak resident set) of pid in bytes, 0 if unknown.
func readRSSPeak(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// parseRates reads a comma-separated list of positive rates.
func parseRates(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--rates: want positive integers separated by commas, got %q", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

func usPerReq(d time.Duration) string {
	if d == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64)
}

// loadavg is the 1-minute load average, for the report header.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

// rawConn is the generator's HTTP/1.1 client: one keep-alive connection
// that writes a prepared request and reads the status and the body. It
// costs a fraction of net/http's client, so that the generator, which
// shares the cores with the server it measures, takes as little of them
// as it can.
type rawConn struct {
	addr string
	conn net.Conn
	rd   *bufio.Reader
	buf  []byte
}

func newRawConn(base string) *rawConn {
	return &rawConn{addr: strings.TrimPrefix(base, "http://")}
}

// post sends one POST with the bearer token and returns the status; body
// receives the answer's body (valid until the next call).
func (c *rawConn) post(path, token string, body []byte) (int, []byte, error) {
	if c.conn == nil {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.rd = conn, bufio.NewReaderSize(conn, 16<<10)
	}
	b := c.buf[:0]
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.addr...)
	b = append(b, "\r\nAuthorization: Bearer "...)
	b = append(b, token...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	c.buf = b
	st, resp, err := c.roundTrip(b)
	if err != nil {
		c.conn.Close()
		c.conn = nil
	}
	return st, resp, err
}

func (c *rawConn) roundTrip(req []byte) (int, []byte, error) {
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, err
	}
	line, err := c.rd.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, closing := -1, false, false
	for {
		h, err := c.rd.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, _ := bytes.Cut(h, []byte(":"))
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			length, _ = strconv.Atoi(string(v))
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			closing = bytes.EqualFold(v, []byte("close"))
		}
	}
	var body []byte
	switch {
	case chunked:
		for {
			l, err := c.rd.ReadSlice('\n')
			if err != nil {
				return 0, nil, err
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(l)), 16, 32)
			if err != nil {
				return 0, nil, fmt.Errorf("bad chunk %q", l)
			}
			chunk := make([]byte, n+2)
			if _, err := io.ReadFull(c.rd, chunk); err != nil {
				return 0, nil, err
			}
			body = append(body, chunk[:n]...)
			if n == 0 {
				break
			}
		}
	case length >= 0:
		body = make([]byte, length)
		if _, err := io.ReadFull(c.rd, body); err != nil {
			return 0, nil, err
		}
	default:
		closing = true
		body, _ = io.ReadAll(c.rd)
	}
	if closing {
		c.conn.Close()
		c.conn = nil
	}
	return status, body, nil
}

func (c *rawConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}
