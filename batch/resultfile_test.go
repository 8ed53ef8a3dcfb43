package batch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
)

// writeResult writes lines to dir/name and commits.
func writeResult(t *testing.T, dir, name string, lines []string) {
	t.Helper()
	w, err := CreateResult(dir, name)
	if err != nil {
		t.Fatalf("CreateResult: %v", err)
	}
	defer w.Abort()
	for _, l := range lines {
		if err := w.WriteLine([]byte(l)); err != nil {
			t.Fatalf("WriteLine(%q): %v", l, err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// readResult returns the lines of a result file, read through Decompressed.
func readResult(t *testing.T, path string) []string {
	t.Helper()
	r, err := OpenResult(path)
	if err != nil {
		t.Fatalf("OpenResult: %v", err)
	}
	defer r.Close()
	dec, err := r.Decompressed()
	if err != nil {
		t.Fatalf("Decompressed: %v", err)
	}
	b, err := io.ReadAll(dec)
	if err != nil {
		t.Fatalf("read decompressed: %v", err)
	}
	return splitLines(t, b)
}

func splitLines(t *testing.T, b []byte) []string {
	t.Helper()
	if len(b) == 0 {
		return nil
	}
	if b[len(b)-1] != '\n' {
		t.Fatalf("content does not end with a newline: %q", b[max(0, len(b)-20):])
	}
	return strings.Split(string(b[:len(b)-1]), "\n")
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func jsonLines(n int) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"cliente_ref":"c%06d","accion":%d,"propension":0.%03d}`, i, i%5, i%1000)
	}
	return lines
}

func TestResultRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
	}{
		{"no lines", nil},
		{"one line", []string{`{"a":1}`}},
		{"empty and carriage return kept", []string{``, "{\"a\":1}\r", `{}`}},
		{"ten thousand", jsonLines(10_000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeResult(t, dir, "r.jsonl.zst", tt.lines)
			if diff := cmp.Diff([]string{"r.jsonl.zst"}, dirNames(t, dir)); diff != "" {
				t.Errorf("files after Commit (-want +got):\n%s", diff)
			}
			path := filepath.Join(dir, "r.jsonl.zst")
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Mode().Perm(); got != 0o600 {
				t.Errorf("mode = %v, want 0600", got)
			}
			if diff := cmp.Diff(tt.lines, readResult(t, path)); diff != "" {
				t.Errorf("decompressed lines (-want +got):\n%s", diff)
			}

			// The stored bytes are one standard zstd stream: decode them
			// with a separate decoder, as a client would.
			r, err := OpenResult(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			raw, err := io.ReadAll(r.Compressed())
			if err != nil {
				t.Fatal(err)
			}
			if got, want := int64(len(raw)), r.Size(); got != want {
				t.Errorf("len(Compressed) = %d, Size = %d", got, want)
			}
			if got, want := r.Size(), st.Size(); got != want {
				t.Errorf("Size = %d, file size %d", got, want)
			}
			dec, err := zstd.NewReader(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer dec.Close()
			plain, err := dec.DecodeAll(raw, nil)
			if err != nil {
				t.Fatalf("DecodeAll(stored bytes): %v", err)
			}
			if diff := cmp.Diff(tt.lines, splitLines(t, plain)); diff != "" {
				t.Errorf("independently decoded lines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResultReadersAreIndependent(t *testing.T) {
	dir := t.TempDir()
	lines := jsonLines(100)
	writeResult(t, dir, "r", lines)
	r, err := OpenResult(filepath.Join(dir, "r"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Interleave a raw read and two decompressing reads of the same file.
	c := r.Compressed()
	if _, err := c.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	d1, err := r.Decompressed()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := r.Decompressed()
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 5)
	if _, err := io.ReadFull(d1, head); err != nil {
		t.Fatal(err)
	}
	all2, err := io.ReadAll(d2)
	if err != nil {
		t.Fatal(err)
	}
	rest1, err := io.ReadAll(d1)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(lines, "\n") + "\n"
	if diff := cmp.Diff(want, string(all2)); diff != "" {
		t.Errorf("second reader (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, string(head)+string(rest1)); diff != "" {
		t.Errorf("first reader (-want +got):\n%s", diff)
	}
}

func TestResultAbort(t *testing.T) {
	dir := t.TempDir()
	writeResult(t, dir, "r", []string{"old"})
	w, err := CreateResult(dir, "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteLine([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"r", "r.tmp"}, dirNames(t, dir)); diff != "" {
		t.Errorf("files while writing (-want +got):\n%s", diff)
	}
	if err := w.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if diff := cmp.Diff([]string{"r"}, dirNames(t, dir)); diff != "" {
		t.Errorf("files after Abort (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"old"}, readResult(t, filepath.Join(dir, "r"))); diff != "" {
		t.Errorf("content after Abort (-want +got):\n%s", diff)
	}
	if err := w.Commit(); !errors.Is(err, ErrResultClosed) {
		t.Errorf("Commit after Abort = %v, want ErrResultClosed", err)
	}
	if err := w.WriteLine([]byte("x")); !errors.Is(err, ErrResultClosed) {
		t.Errorf("WriteLine after Abort = %v, want ErrResultClosed", err)
	}
	if err := w.Abort(); err != nil {
		t.Errorf("second Abort = %v, want nil", err)
	}
}

func TestResultCommitReplacesAndAbortAfterCommitIsNoop(t *testing.T) {
	dir := t.TempDir()
	writeResult(t, dir, "r", []string{"v1"})
	w, err := CreateResult(dir, "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteLine([]byte("v2")); err != nil {
		t.Fatal(err)
	}
	if got := w.Lines(); got != 1 {
		t.Errorf("Lines = %d, want 1", got)
	}
	// Until Commit the old content is what readers get.
	if diff := cmp.Diff([]string{"v1"}, readResult(t, filepath.Join(dir, "r"))); diff != "" {
		t.Errorf("before Commit (-want +got):\n%s", diff)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Errorf("Abort after Commit = %v, want nil", err)
	}
	if diff := cmp.Diff([]string{"v2"}, readResult(t, filepath.Join(dir, "r"))); diff != "" {
		t.Errorf("after Commit and Abort (-want +got):\n%s", diff)
	}
}

func TestResultWriteLineRefusesBadLines(t *testing.T) {
	tests := []struct {
		name string
		line []byte
	}{
		{"newline inside", []byte("{\"a\":\n1}")},
		{"trailing newline", []byte("{}\n")},
		{"too long", bytes.Repeat([]byte("x"), MaxResultLine+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := CreateResult(dir, "r")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if err := w.WriteLine(tt.line); !errors.Is(err, ErrResultLine) {
				t.Fatalf("WriteLine = %v, want ErrResultLine", err)
			}
			// The writer stays usable and the bad line left no trace.
			if err := w.WriteLine([]byte("ok")); err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"ok"}, readResult(t, filepath.Join(dir, "r"))); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreateResultRefusesBadNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "../r", "r.tmp"} {
		t.Run(name, func(t *testing.T) {
			if w, err := CreateResult(t.TempDir(), name); err == nil {
				w.Abort()
				t.Errorf("CreateResult(%q) = nil error, want an error", name)
			}
		})
	}
	if _, err := CreateResult(filepath.Join(t.TempDir(), "missing"), "r"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CreateResult in a missing dir = %v, want ErrNotExist", err)
	}
}

func TestRewriteResult(t *testing.T) {
	lines := []string{
		`{"cliente_ref":"ana","accion":1}`,
		`{"cliente_ref":"beto","accion":0}`,
		`{"cliente_ref":"carla","accion":2}`,
		`{"cliente_ref":"beto","accion":3}`,
	}
	tests := []struct {
		name        string
		drop        string
		wantRemoved int
		wantLines   []string
	}{
		{"drops every line of the customer", "beto", 2, []string{lines[0], lines[2]}},
		{"first line", "ana", 1, []string{lines[1], lines[2], lines[3]}},
		{"no match leaves the file alone", "nadie", 0, lines},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "r.jsonl.zst")
			writeResult(t, dir, "r.jsonl.zst", lines)
			before, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			needle := []byte(`"cliente_ref":"` + tt.drop + `"`)
			removed, err := RewriteResult(path, func(line []byte) bool { return !bytes.Contains(line, needle) })
			if err != nil {
				t.Fatalf("RewriteResult: %v", err)
			}
			if removed != tt.wantRemoved {
				t.Errorf("removed = %d, want %d", removed, tt.wantRemoved)
			}
			if diff := cmp.Diff(tt.wantLines, readResult(t, path)); diff != "" {
				t.Errorf("lines after rewrite (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"r.jsonl.zst"}, dirNames(t, dir)); diff != "" {
				t.Errorf("files after rewrite (-want +got):\n%s", diff)
			}
			after, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if same := os.SameFile(before, after); same != (tt.wantRemoved == 0) {
				t.Errorf("same file after rewrite = %v, want %v", same, tt.wantRemoved == 0)
			}
		})
	}
}

func TestRewriteResultKeepsOpenReadersOnOldContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r")
	writeResult(t, dir, "r", []string{"a", "b"})
	r, err := OpenResult(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := RewriteResult(path, func(l []byte) bool { return string(l) != "b" }); err != nil {
		t.Fatal(err)
	}
	dec, err := r.Decompressed()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(dec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("a\nb\n", string(b)); diff != "" {
		t.Errorf("reader opened before the rewrite (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a"}, readResult(t, path)); diff != "" {
		t.Errorf("after rewrite (-want +got):\n%s", diff)
	}
}

func TestRewriteResultErrorsLeaveFileUnchanged(t *testing.T) {
	dir := t.TempDir()
	if _, err := RewriteResult(filepath.Join(dir, "missing"), func([]byte) bool { return false }); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("RewriteResult(missing) = %v, want ErrNotExist", err)
	}

	// A damaged file (flipped byte near the end: checksum mismatch) is not
	// rewritten, even when keep would drop lines.
	writeResult(t, dir, "r", jsonLines(1000))
	path := filepath.Join(dir, "r")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RewriteResult(path, func([]byte) bool { return false }); err == nil {
		t.Fatal("RewriteResult of a damaged file = nil error, want an error")
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b) {
		t.Error("damaged file was changed")
	}
	if diff := cmp.Diff([]string{"r"}, dirNames(t, dir)); diff != "" {
		t.Errorf("files after failed rewrite (-want +got):\n%s", diff)
	}
}

func TestAcceptsZstd(t *testing.T) {
	tests := []struct {
		header string
		want   bool
	}{
		{"", false},
		{"gzip, deflate, br", false},
		{"zstd", true},
		{"gzip, ZSTD", true},
		{"br;q=1.0, zstd;q=0.5", true},
		{"zstd;q=0", false},
		{"zstd; q=0.000", false},
		{"zstd;q=bad", false},
		{"*", false},
		{"zstdx", false},
		{" zstd ;q=1", true},
	}
	for _, tt := range tests {
		if got := AcceptsZstd(tt.header); got != tt.want {
			t.Errorf("AcceptsZstd(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}
}

// decisionLine appends a realistic ~300-byte result line for customer i:
// the shape of a batch decision, with a random (incompressible) signed id.
func decisionLine(dst []byte, i int, rnd *rand.Rand) []byte {
	const b32 = "abcdefghijklmnopqrstuvwxyz234567"
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	dst = append(dst, `{"cliente_ref":"cli-`...)
	dst = strconv.AppendInt(dst, int64(1_000_000+i*7), 10)
	dst = append(dst, `","decision_id":"dec_acme_`...)
	for range 20 {
		dst = append(dst, b32[rnd.IntN(32)])
	}
	dst = append(dst, '.')
	for range 43 {
		dst = append(dst, b64[rnd.IntN(64)])
	}
	dst = append(dst, `","accion":`...)
	dst = strconv.AppendInt(dst, int64(rnd.IntN(6)), 10)
	dst = append(dst, `,"propension":`...)
	dst = strconv.AppendFloat(dst, rnd.Float64(), 'g', -1, 64)
	dst = append(dst, `,"explorado":false,"en_control":false,"politica_version":17,"razon":"mayor margen esperado","caduca_en":"2026-03-0`...)
	dst = strconv.AppendInt(dst, int64(1+rnd.IntN(9)), 10)
	dst = append(dst, `T12:`...)
	dst = strconv.AppendInt(dst, int64(10+rnd.IntN(50)), 10)
	dst = append(dst, `:00Z","campana_id":"verano-2026"}`...)
	return dst
}

func BenchmarkResultWrite500k(b *testing.B) {
	if testing.Short() {
		b.Skip("writes 150 MB per iteration")
	}
	const n = 500_000
	dir := b.TempDir()
	var total int64
	var stored int64
	b.ReportAllocs()
	for b.Loop() {
		rnd := rand.New(rand.NewPCG(1, 2))
		w, err := CreateResult(dir, "r.jsonl.zst")
		if err != nil {
			b.Fatal(err)
		}
		total = 0
		var line []byte
		for i := range n {
			line = decisionLine(line[:0], i, rnd)
			total += int64(len(line)) + 1
			if err := w.WriteLine(line); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Commit(); err != nil {
			b.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(dir, "r.jsonl.zst"))
		if err != nil {
			b.Fatal(err)
		}
		stored = st.Size()
	}
	b.SetBytes(total)
	b.ReportMetric(float64(total)/n, "B/line")
	b.ReportMetric(float64(total)/float64(stored), "ratio")
}
