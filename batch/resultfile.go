package batch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/coupond/coupond/atomicfile"
)

// A result file is JSON Lines (one decision per line, each line ended by
// '\n') compressed as a single zstd frame with a content checksum. It is
// written to "<name>.tmp" and only appears under its final name, complete
// and synced, when the writer commits (tmp → fsync → rename → fsync dir), so
// a reader never sees a partial file and a crash leaves at most a stale
// ".tmp" behind.

// ResultContentType is the media type a result file is served as (contract
// section 4), compressed or not.
const ResultContentType = "application/x-ndjson"

// MaxResultLine is the longest line, in bytes without its '\n', that a result
// file may hold. WriteLine refuses longer lines so that every committed file
// can be read back line by line by RewriteResult.
const MaxResultLine = 16 << 20

// tmpSuffix names a result file being written or rewritten.
const tmpSuffix = atomicfile.TmpSuffix

// Result file errors.
var (
	ErrResultLine    = errors.New("batch: result line must be at most MaxResultLine bytes and hold no newline")
	ErrResultClosed  = errors.New("batch: result writer already committed or aborted")
	ErrResultDamaged = errors.New("batch: result file damaged")
)

// resultIOError is a result file's failed file system call (a full disk,
// an I/O error), as opposed to a bad line or a closed writer: the runner
// tells the job's integrator that the disk failed (publicError).
type resultIOError struct{ err error }

func (e *resultIOError) Error() string { return e.err.Error() }
func (e *resultIOError) Unwrap() error { return e.err }

// ioError marks err as a result file's file system failure.
func ioError(err error) error { return &resultIOError{err} }

// resultEncoder returns the encoder every result file is written with.
//
// SpeedFastest: on decision lines (~300 bytes, a third of them the random
// signed decision_id) it compresses as well as SpeedDefault (ratio ~4.4)
// with ~35 % less CPU (~400 MB/s against ~250 MB/s on one core), which
// matters on a 2-core machine where the decider runs at the same time.
// Concurrency 2 compresses blocks on a second goroutine while the caller
// decides and marshals the next lines. See BenchmarkResultWrite500k. Zero
// frames are written so that a job with no lines still yields a valid
// (empty) zstd stream.
func resultEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(2),
		zstd.WithEncoderCRC(true),
		zstd.WithZeroFrames(true),
	)
}

// resultDecoder returns a synchronous decoder (no goroutines of its own) for
// a result file; it verifies the frame checksum.
func resultDecoder(r io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
}

// ResultWriter writes one result file. It is not safe for concurrent use.
// Every writer must end with Commit or Abort; deferring Abort right after
// CreateResult is the intended pattern, since Abort after Commit does nothing.
type ResultWriter struct {
	name  string
	f     *atomicfile.File
	enc   *zstd.Encoder
	buf   *bufio.Writer // batches lines into large encoder writes
	lines int
	err   error // first write error; sticky
	done  bool
}

// CreateResult starts the result file dir/name, writing to dir/name.tmp
// (truncated if a stale one exists, mode 0600) until Commit. name must be a
// plain file name (no separator) not ending in ".tmp"; dir must exist.
// A file already named dir/name is replaced only when Commit succeeds.
func CreateResult(dir, name string) (*ResultWriter, error) {
	return createResult(atomicfile.OS{}, dir, name)
}

// createResult is CreateResult on fsys.
func createResult(fsys atomicfile.FS, dir, name string) (*ResultWriter, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, os.PathSeparator) ||
		strings.ContainsRune(name, '/') || strings.HasSuffix(name, tmpSuffix) {
		return nil, fmt.Errorf("batch: result file name %q is not a plain file name", name)
	}
	f, err := atomicfile.CreateFS(fsys, filepath.Join(dir, name), 0o600)
	if err != nil {
		return nil, ioError(fmt.Errorf("batch: create result: %w", err))
	}
	enc, err := resultEncoder(f)
	if err != nil {
		f.Abort()
		return nil, fmt.Errorf("batch: create result: %w", err)
	}
	return &ResultWriter{name: name, f: f, enc: enc, buf: bufio.NewWriterSize(enc, 256<<10)}, nil
}

// WriteLine appends line and a '\n'. line must be one complete JSON value as
// produced by json.Marshal (no newline inside, at most MaxResultLine bytes);
// otherwise WriteLine returns ErrResultLine and writes nothing. The writer
// does not retain line. After a write error every later call returns it.
func (w *ResultWriter) WriteLine(line []byte) error {
	if w.done {
		return ErrResultClosed
	}
	if w.err != nil {
		return w.err
	}
	if len(line) > MaxResultLine || bytes.IndexByte(line, '\n') >= 0 {
		return ErrResultLine
	}
	if _, err := w.buf.Write(line); err != nil {
		w.err = ioError(fmt.Errorf("batch: write result: %w", err))
		return w.err
	}
	if err := w.buf.WriteByte('\n'); err != nil {
		w.err = ioError(fmt.Errorf("batch: write result: %w", err))
		return w.err
	}
	w.lines++
	return nil
}

// Lines returns how many lines were written so far.
func (w *ResultWriter) Lines() int { return w.lines }

// Commit finishes the zstd frame, fsyncs the file, renames it to its final
// name and fsyncs the directory, so the file is durable once Commit returns
// nil. On any error the temporary file is removed and no file appears under
// the final name (an older file of that name is left as it was), except
// when only the final directory fsync fails: the complete file is then in
// place but its rename may not survive a crash. Commit after Commit or Abort
// returns ErrResultClosed.
func (w *ResultWriter) Commit() error {
	if w.done {
		return ErrResultClosed
	}
	w.done = true
	err := w.err
	if err == nil {
		err = w.buf.Flush()
	}
	if cerr := w.enc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		w.f.Abort()
	} else {
		err = w.f.Commit()
	}
	if err != nil {
		return ioError(fmt.Errorf("batch: commit result %s: %w", w.name, err))
	}
	return nil
}

// Abort discards the file being written and removes the temporary file. It
// does nothing after Commit or a previous Abort.
func (w *ResultWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.enc.Close() // stops the encoder's goroutines; its output is discarded with the file
	if err := w.f.Abort(); err != nil {
		return fmt.Errorf("batch: abort result %s: %w", w.name, err)
	}
	return nil
}

// Result is an open, committed result file, to be sent to a client either
// as stored (zstd) or decompressed. It is safe for concurrent use: every
// reader it returns reads the file independently of the others. Close it
// when done; readers obtained from it fail after Close.
type Result struct {
	f    *os.File
	size int64

	mu   sync.Mutex
	decs []*zstd.Decoder
}

// OpenResult opens the committed result file at path. A file that is
// rewritten or removed after OpenResult (RewriteResult, retention) keeps
// serving the content it had when opened. An empty file is ErrResultDamaged:
// a committed file holds at least one zstd frame, even without lines, and
// an empty stream would read as a complete result of no lines.
func OpenResult(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("batch: open result: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("batch: open result: %w", err)
	}
	if st.Size() == 0 {
		f.Close()
		return nil, fmt.Errorf("batch: open result %s: empty file: %w", filepath.Base(path), ErrResultDamaged)
	}
	return &Result{f: f, size: st.Size()}, nil
}

// Size is the stored (compressed) size in bytes: the Content-Length of a
// response that sends Compressed with Content-Encoding: zstd.
func (r *Result) Size() int64 { return r.size }

// Compressed returns a new reader of the stored bytes, one zstd frame,
// positioned at the start. It is an io.ReadSeeker, so it can go to
// http.ServeContent.
func (r *Result) Compressed() *io.SectionReader { return io.NewSectionReader(r.f, 0, r.size) }

// Decompressed returns a new reader of the JSON Lines content, decompressing
// the file from its start as it is read. It reports an error if the file is
// not valid zstd or its checksum does not match, possibly only after part of
// the content has been returned (so a handler that has already sent headers
// can only abort the response). Its resources are freed by Close.
func (r *Result) Decompressed() (io.Reader, error) {
	dec, err := resultDecoder(r.Compressed())
	if err != nil {
		return nil, fmt.Errorf("batch: decompress result: %w", err)
	}
	r.mu.Lock()
	r.decs = append(r.decs, dec)
	r.mu.Unlock()
	return dec, nil
}

// Close closes the file and every decompressing reader.
func (r *Result) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.decs {
		d.Close()
	}
	r.decs = nil
	return r.f.Close()
}

// AcceptsZstd reports whether an Accept-Encoding header value names zstd
// with a non-zero quality, i.e. whether the stored bytes may be sent as they
// are with Content-Encoding: zstd. A wildcard "*" does not count: only
// clients that ask for zstd by name get it.
func AcceptsZstd(acceptEncoding string) bool {
	for part := range strings.SplitSeq(acceptEncoding, ",") {
		coding, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "zstd") {
			continue
		}
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					f = 0
				}
				q = f
			}
		}
		return q > 0
	}
	return false
}

// RewriteResult rewrites the committed result file at path keeping only the
// lines for which keep returns true, and reports how many lines it dropped.
// keep gets each line without its '\n'; the slice is only valid during the
// call. If no line is dropped the file is left untouched. Otherwise the new
// file is written to path.tmp and atomically replaces path (tmp → fsync →
// rename → fsync dir); on error path is unchanged. Callers must not rewrite
// or create the same file concurrently (they would share path.tmp). Readers
// that opened the file before keep reading the old content. A job's result
// file is rewritten with Runner.RewriteResult, which does not put back a
// file retention removed meanwhile.
func RewriteResult(path string, keep func(line []byte) bool) (removed int, err error) {
	return rewriteResult(path, keep, (*ResultWriter).Commit)
}

// rewriteResult is RewriteResult, the new file put in place by commit
// (which, not committing w, leaves path unchanged and returns an error).
func rewriteResult(path string, keep func(line []byte) bool, commit func(w *ResultWriter) error) (removed int, err error) {
	src, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("batch: rewrite result: %w", err)
	}
	defer src.Close()
	dec, err := resultDecoder(bufio.NewReaderSize(src, 256<<10))
	if err != nil {
		return 0, fmt.Errorf("batch: rewrite result: %w", err)
	}
	defer dec.Close()
	w, err := CreateResult(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return 0, err
	}
	defer w.Abort()

	sc := bufio.NewScanner(dec)
	sc.Buffer(make([]byte, 64<<10), MaxResultLine+1)
	sc.Split(scanLF)
	for sc.Scan() {
		line := sc.Bytes()
		if !keep(line) {
			removed++
			continue
		}
		if err := w.WriteLine(line); err != nil {
			return 0, fmt.Errorf("batch: rewrite result %s: %w", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("batch: rewrite result %s: %w", path, err)
	}
	if removed == 0 {
		return 0, nil
	}
	if err := commit(w); err != nil {
		return 0, err
	}
	return removed, nil
}

// scanLF splits at '\n' only, keeping any '\r' (bufio.ScanLines drops it),
// so rewritten lines are byte-for-byte the lines written.
func scanLF(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
