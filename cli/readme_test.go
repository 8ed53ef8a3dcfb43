package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/internal/golden"
)

const readmePath = "../README.md"

// between returns the text of s between the lines begin and end.
func between(t *testing.T, s, begin, end string) (before, inside, after string) {
	t.Helper()
	i := strings.Index(s, begin+"\n")
	j := strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks %s … %s", begin, end)
	}
	i += len(begin) + 1
	return s[:i], s[i:j], s[j:]
}

// TestREADMEFlags: the README's configuration reference is what "coupond
// docs flags" prints (every flag and environment variable of every
// command). -update rewrites it.
func TestREADMEFlags(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := writeFlagDocs(&want, newRoot(&app{})); err != nil {
		t.Fatal(err)
	}
	before, inside, after := between(t, string(data), "<!-- flags:begin -->", "<!-- flags:end -->")
	if inside == want.String() {
		return
	}
	if golden.Updating() {
		if err := os.WriteFile(readmePath, []byte(before+want.String()+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's configuration reference is stale: run go test ./cli -run TestREADMEFlags -update")
}

// walkthroughBlock is a shell block of the README's walkthrough and the
// answer blocks (```json, and the lines of ```text blocks that start with
// "{") that directly follow it, with the names of the HTTP headers those
// ```text blocks show (httpHeaderNames).
type walkthroughBlock struct {
	script  string
	answers []string
	headers []string
}

// walkthrough extracts the ```sh blocks between the walkthrough markers,
// with the ```json and ```text blocks that follow each one with nothing
// but blank lines between.
func walkthrough(t *testing.T, readme string) []walkthroughBlock {
	t.Helper()
	_, text, _ := between(t, readme, "<!-- walkthrough:begin -->", "<!-- walkthrough:end -->")
	var blocks []walkthroughBlock
	var cur *strings.Builder
	lang := ""
	adjacent := false // only blank lines since the last sh block ended
	for _, line := range strings.Split(text, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			lang, cur = strings.TrimPrefix(line, "```"), &strings.Builder{}
		case cur != nil && line == "```":
			switch {
			case lang == "sh":
				blocks = append(blocks, walkthroughBlock{script: cur.String()})
				adjacent = true
			case lang == "json" && adjacent && len(blocks) > 0:
				b := &blocks[len(blocks)-1]
				b.answers = append(b.answers, cur.String())
			case lang == "text" && adjacent && len(blocks) > 0:
				b := &blocks[len(blocks)-1]
				b.answers = append(b.answers, jsonLines(cur.String()))
				b.headers = append(b.headers, httpHeaderNames(cur.String())...)
			}
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		case strings.TrimSpace(line) != "":
			adjacent = false
		}
	}
	if len(blocks) < 8 {
		t.Fatalf("the walkthrough has %d shell blocks; the markers or fences moved", len(blocks))
	}
	return blocks
}

// TestREADMEWalkthrough runs the README's walkthrough, as written, against
// a freshly built coupond on a scratch data dir and free ports: tenant,
// credential, token, catalog, events, a decision and its confirmation, a
// webhook with a receiver that verifies its signature, a batch job and its
// result, shadow mode and its report, an export and a deletion. Every JSON
// answer shown right after a block must have the keys, nested ones
// included, of a JSON line that block printed. The date command there
// answers 10 minutes ahead, as for a reader who takes that long: the
// sandbox tenant's clock stands still, so the blocks must not time events
// by the real clock.
func TestREADMEWalkthrough(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not found (CI=true): .ci/run installs it", tool)
			}
			t.Skipf("%s not found: the README walkthrough needs it", tool)
		}
	}
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	blocks := walkthrough(t, string(data))
	bin := coupondBinary(t)
	tmp := t.TempDir()

	var script strings.Builder
	script.WriteString("set -eu -o pipefail\n")
	for i, b := range blocks {
		fmt.Fprintf(&script, "echo '@@block %d@@'\n%s", i, b.script)
	}
	script.WriteString("echo '@@end@@'\n")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String()+walkthroughEpilogue)
	cmd.Dir = ".."
	path := filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	if later := laterDate(t); later != "" {
		path = later + string(os.PathListSeparator) + path
	}
	cmd.Env = append(os.Environ(),
		"PATH="+path,
		"TMPDIR="+tmp, "COUPOND_ADDR="+freeAddr(t), "HOOK="+freeAddr(t), "NO_COLOR=1")
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("walkthrough ran in %s", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("the README walkthrough failed: %v\n%s%s", err, out, serveLogs(tmp))
	}
	s := string(out)
	if !strings.Contains(s, "@@end@@") {
		t.Fatalf("the walkthrough stopped early:\n%s", s)
	}
	for _, want := range []string{`"estado_ejecucion":"ejecutada"`, "verified msg_lote_", "Location: /v1/lotes-decision/lote_", "completed in ",
		`"en_sombra":true`, "tenant acme: 1 shadow decision\n", "verdict: not ready to leave shadow mode",
		"Location: /v1/clientes/c-7f3a9b21/exportacion", `"estado":"programado"`} {
		if !strings.Contains(s, want) {
			t.Errorf("the walkthrough's output lacks %q", want)
		}
	}
	// The shadow decision is drawn too: in the control group it is left
	// out of the final rewards.
	if !shadowRewardsRE.MatchString(s) {
		t.Errorf("the walkthrough's output lacks the shadow verdict's count (%s)", shadowRewardsRE)
	}
	if !shadowAgreementRE.MatchString(s) {
		t.Errorf("the walkthrough's output lacks the shadow report's agreement (%s)", shadowAgreementRE)
	}
	checkShadowReport(t, string(data), s)
	// The batch's decisions are drawn: any number of its 3 lines may send.
	if !batchDoneRE.MatchString(s) {
		t.Errorf("the walkthrough's output lacks the batch's last line (%s)", batchDoneRE)
	}
	outputs := splitBlocks(s, len(blocks))
	watched := false
	for i, b := range blocks {
		if strings.Contains(b.script, "batch watch") {
			watched = true
			if strings.Contains(outputs[i], "\r") || !strings.Contains(outputs[i], "completado [") {
				t.Errorf("batch watch piped into cat: want plain lines without \\r, got %q", outputs[i])
			}
		}
	}
	if !watched {
		t.Error("the walkthrough no longer watches its batch job")
	}
	if testing.Verbose() {
		t.Logf("walkthrough output:\n%s", s)
	}

	// The answers shown in the README have the keys, nested ones included,
	// of what the blocks print, and the HTTP headers it shows are those the
	// blocks print.
	for i, b := range blocks {
		if len(b.headers) > 0 {
			if diff := cmp.Diff(b.headers, httpHeaderNames(outputs[i])); diff != "" {
				t.Errorf("block %d: the HTTP headers the README shows differ from those printed (-README +printed):\n%s", i, diff)
			}
		}
		for _, ans := range b.answers {
			for _, line := range strings.Split(strings.TrimSpace(ans), "\n") {
				if line == "" {
					continue
				}
				want, ok := jsonShape(line)
				if !ok {
					t.Errorf("block %d: README answer is not a JSON object: %s", i, line)
					continue
				}
				if !slices.ContainsFunc(strings.Split(outputs[i], "\n"), func(l string) bool {
					got, ok := jsonShape(strings.TrimSpace(l))
					return ok && got == want
				}) {
					t.Errorf("block %d: no output line has the shape %s of the README's answer\n%s", i, want, outputs[i])
				}
			}
		}
	}
}

// laterDate writes, into a new directory it returns, a date command that
// tells the time 10 minutes ahead: a reader who takes that long between the
// walkthrough's blocks. Where date is not GNU date it returns "" (no shim).
func laterDate(t *testing.T) string {
	t.Helper()
	date, err := exec.LookPath("date")
	if err != nil || exec.Command(date, "--version").Run() != nil {
		return ""
	}
	dir := t.TempDir()
	shim := fmt.Sprintf("#!/bin/sh\nexec %s -d \"@$(( $(%s +%%s) + 600 ))\" \"$@\"\n", date, date)
	if err := os.WriteFile(filepath.Join(dir, "date"), []byte(shim), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// httpHeaderNames returns the names of the header lines that follow each
// "HTTP/" status line of text, up to the next blank line, sorted, without
// repeats: what a README block of curl -si output shows.
func httpHeaderNames(text string) []string {
	var names []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimRight(l, "\r")
		switch {
		case strings.HasPrefix(l, "HTTP/"):
			in = true
		case l == "" || strings.HasPrefix(l, "{"):
			in = false
		case in:
			if name, _, ok := strings.Cut(l, ":"); ok {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// jsonLines returns the lines of a text block that start with "{".
func jsonLines(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "{") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// walkthroughEpilogue stops what the walkthrough left running if it failed
// half-way (the last block stops the server itself).
const walkthroughEpilogue = "\nkill $(jobs -p) 2>/dev/null || true\n"

// checkShadowReport checks that the walkthrough's output out printed the
// lines of the README's shown shadow report that no draw changes
// (shadowReportLines).
func checkShadowReport(t *testing.T, readme, out string) {
	t.Helper()
	for _, line := range shadowReportLines(t, readme) {
		if !strings.Contains(out, "\n"+line+"\n") {
			t.Errorf("the README's shadow report shows %q; the walkthrough printed no such line", line)
		}
	}
}

// shadowReportLines returns the lines of the README's shown shadow report
// (the text block from "tenant acme: 1 shadow decision") that no draw
// changes, its reasons included: without the clock line before it, the
// values, the count of final rewards (the decision may fall in the control group,
// shadowRewardsRE) and the agreement (the suggestion may explore a coupon
// where the caller's rule sent nothing, shadowAgreementRE).
func shadowReportLines(t *testing.T, readme string) []string {
	t.Helper()
	_, block, ok := strings.Cut(readme, "\ntenant acme: 1 shadow decision\n")
	block, _, closed := strings.Cut(block, "\n```")
	if !ok || !closed {
		t.Fatal("README: no shown shadow report (a text block with \"tenant acme: 1 shadow decision\")")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		drawn := strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "  - ") || // the values
			strings.HasPrefix(l, "agreement engine/caller:")
		if !strings.Contains(l, "final reward") && !drawn {
			lines = append(lines, l)
		}
	}
	if len(lines) < 4 {
		t.Fatalf("README's shadow report: %d lines no draw changes, want at least 4: %q", len(lines), lines)
	}
	return lines
}

// TestShadowReportDraws: the walkthrough's check of its shadow report
// takes the agreement line as drawn. It compared it with the README's
// "100.0%", and so failed whenever the suggestion explored a coupon (about
// 1 run in 20): the report then reads 0.0%.
func TestShadowReportDraws(t *testing.T) {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range shadowReportLines(t, string(readme)) {
		if strings.HasPrefix(l, "agreement") {
			t.Errorf("shadowReportLines keeps the drawn line %q", l)
		}
	}
	for _, tt := range []struct {
		line string
		want bool
	}{
		{"agreement engine/caller:  100.0%  (1 compared)", true},
		{"agreement engine/caller:    0.0%  (1 compared)", true},
		{"agreement engine/caller:    n/a  (0 compared)", false},
	} {
		if got := shadowAgreementRE.MatchString("\n" + tt.line + "\n"); got != tt.want {
			t.Errorf("shadowAgreementRE on %q: %v, want %v", tt.line, got, tt.want)
		}
	}
}

// shadowAgreementRE is the shadow report's agreement over its one
// decision: the suggestion is drawn (about 1 in 20 explores a coupon), and
// the caller's rule sent nothing.
var shadowAgreementRE = regexp.MustCompile(`\nagreement engine/caller: +(100\.0|0\.0)%  \(1 compared\)\n`)

// shadowRewardsRE is the shadow verdict's count of its one decision.
var shadowRewardsRE = regexp.MustCompile(`\n  - (1 confirmed decision with its final reward|0 confirmed decisions with their final reward) \(needs`)

// batchDoneRE is batch watch's last line for the walkthrough's 3-line job;
// its decisions are drawn, so 0 to 3 may send ("1 send", singular).
var batchDoneRE = regexp.MustCompile(`completed in [^:]+: 3 lines, ([02-3] sends|1 send)\b`)

// splitBlocks cuts the output at the block markers.
func splitBlocks(s string, n int) []string {
	out := make([]string, n)
	for i := range n {
		_, rest, ok := strings.Cut(s, fmt.Sprintf("@@block %d@@\n", i))
		if !ok {
			continue
		}
		end := strings.Index(rest, "@@block ")
		if end < 0 {
			end = strings.Index(rest, "@@end@@")
		}
		if end >= 0 {
			rest = rest[:end]
		}
		out[i] = rest
	}
	return out
}

// jsonShape returns the shape of a JSON object line: its keys, sorted, and
// those of the objects and arrays inside it, with every scalar as "_"
// (null included), so two answers that differ only in values have the same
// shape.
func jsonShape(line string) (string, bool) {
	var v any
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &v) != nil {
		return "", false
	}
	var b strings.Builder
	writeShape(&b, v)
	return b.String(), true
}

func writeShape(b *strings.Builder, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := slices.Sorted(maps.Keys(v))
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.Quote(k) + ":")
			writeShape(b, v[k])
		}
		b.WriteString("}")
	case []any:
		b.WriteString("[")
		for i, e := range v {
			if i > 0 {
				b.WriteString(",")
			}
			writeShape(b, e)
		}
		b.WriteString("]")
	default:
		b.WriteString("_")
	}
}

func serveLogs(tmp string) string {
	logs, _ := filepath.Glob(filepath.Join(tmp, "*", "serve.log"))
	var b strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "\n--- %s\n%s", l, data)
	}
	return b.String()
}

// TestREADMEWebhookSnippet compiles the README's Go verification snippet
// and runs it on a delivery signed by the server's code: it must accept
// the delivery and refuse it with one byte of the body changed.
func TestREADMEWebhookSnippet(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("README.md has no Go block")
	}
	secret := batch.NewWebhookSecret()
	key, err := batch.ParseWebhookSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"tipo":"lote.completado","job_id":"lote_x"}`
	now := time.Now()
	sig := batch.SignWebhook(key, "msg_lote_x", now, []byte(body))
	prog := fmt.Sprintf(`package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

%s
func main() {
	h := http.Header{}
	h.Set("webhook-id", "msg_lote_x")
	h.Set("webhook-timestamp", %q)
	h.Set("webhook-signature", %q)
	fmt.Println(verify(%q, h, []byte(%q)), verify(%q, h, []byte(%q)))
}
`, m[1], strconv.FormatInt(now.Unix(), 10), sig, secret, body, secret, strings.Replace(body, "x", "y", 1))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module snippet\n\ngo 1.24\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "true false" {
		t.Errorf("the README's verify: %v\n%s\nwant \"true false\" (accepts the signed body, refuses an altered one)", err, out)
	}
}

// TestREADMEClientSnippet compiles the README's Go client example (the Go
// block that calls client.New) inside a function of this module, with
// send, ctx, clientID and clientSecret declared: a renamed option, field or
// method of the client library, or a snippet that no longer compiles,
// fails here. The file is given to the compiler as an overlay, so nothing
// is written into the repository.
func TestREADMEClientSnippet(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	var snippet string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(data, -1) {
		if bytes.Contains(m[1], []byte("client.New(")) {
			snippet = string(m[1])
		}
	}
	if snippet == "" {
		t.Fatal("README.md has no Go block calling client.New")
	}
	body := regexp.MustCompile(`(?m)^import .*\n`).ReplaceAllString(snippet, "")
	prog := "package main\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"fmt\"\n\t\"log\"\n\t\"time\"\n\n\t\"github.com/coupond/coupond/client\"\n)\n\n" +
		"func send(int) error { return nil }\n\n" +
		"func run(ctx context.Context, clientID, clientSecret string) error {\n" + body + "\treturn err\n}\n\n" +
		"func main() { _ = run(context.Background(), \"id\", \"secret\") }\n"
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(root, "readmeclientsnippet", "main.go"): src}})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", ov, "-o", filepath.Join(dir, "snippet"), "./readmeclientsnippet")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the README's client example does not compile: %v\n%s\n%s", err, out, prog)
	}
}

// TestBatchDoneRE: the walkthrough's check accepts every count of sends
// batch watch can print for its job (CI once drew exactly one).
func TestBatchDoneRE(t *testing.T) {
	for n := 0; n <= 3; n++ {
		line := fmt.Sprintf("completed in 14ms: %s, %s\n", plural(3, "line"), plural(n, "send"))
		if !batchDoneRE.MatchString(line) {
			t.Errorf("batchDoneRE misses %q", line)
		}
	}
	if batchDoneRE.MatchString("completed in 14ms: 3 lines, 4 sends\n") {
		t.Error("batchDoneRE accepts 4 sends from a 3-line job")
	}
}

// TestREADMEWalkthroughPortTaken: when another server already answers on
// the API's address (the first screen's "go run . serve" left running,
// say), the walkthrough's first block shows serve's error naming --addr
// instead of going on against that other server, where every later block
// failed with 401s and a null token and serve's error stayed in its log.
func TestREADMEWalkthroughPortTaken(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not found: the README walkthrough needs it")
	}
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	first := walkthrough(t, string(data))[0].script
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer other.Close()
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -u\n"+first+"echo '@@end@@'\n"+walkthroughEpilogue)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(coupondBinary(t))+string(os.PathListSeparator)+os.Getenv("PATH"),
		"TMPDIR="+tmp, "COUPOND_ADDR="+other.Listener.Addr().String(), "COUPOND_CONSOLE_ADDR=", "NO_COLOR=1")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "@@end@@") {
		t.Fatalf("the first block failed: %v\n%s", err, out)
	}
	if want := "--addr " + other.Listener.Addr().String(); !strings.Contains(string(out), want) {
		t.Errorf("with the API's address taken, the first block printed no error naming %q:\n%s", want, out)
	}
}

// TestREADMEWalkthroughKeepsSecretsOffCommandLines: no coupond command of
// the walkthrough takes a secret in a flag (a name secretFlag knows, such
// as --secret): a process's arguments are readable by every user of the
// machine (ps, /proc/PID/cmdline), its environment only by its own user,
// so a secret goes in the flag's COUPOND_ variable. Integrators copy these
// lines; the webhook receiver's took the webhook secret on its command
// line.
func TestREADMEWalkthroughKeepsSecretsOffCommandLines(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	flag := regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	var got []string
	for _, b := range walkthrough(t, string(data)) {
		for _, line := range strings.Split(b.script, "\n") {
			_, cmd, ok := strings.Cut(line, "coupond ")
			if !ok {
				continue
			}
			for _, m := range flag.FindAllStringSubmatch(cmd, -1) {
				if secretFlag(m[1]) {
					got = append(got, strings.TrimSpace(line))
				}
			}
		}
	}
	if len(got) > 0 {
		t.Errorf("walkthrough commands that pass a secret in a flag (use its COUPOND_ variable):\n%s", strings.Join(got, "\n"))
	}
}
