package cli

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/spf13/cobra"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/store"
)

// The baseline of "bench decisions --baseline": the least an HTTP decision
// service must do, in its own process so that it meets the generator on the
// same cores as coupond does. It routes with httprouter, checks an
// HMAC-SHA256 bearer token, decodes and checks a decision request with
// encoding/json and encodes a decision-sized answer; it stores nothing.
//
// With --sync-dir it is the floor of "bench decisions --baseline":
// the same handler, which also commits each decision (a fresh key, the
// answer and the request, about 350 bytes) to raw Pebble on that directory
// with Sync before it answers — the least any service that makes an
// acknowledged decision durable on this disk must do.
func benchBareServerCmd() *cobra.Command {
	var addr, syncDir string
	cmd := internalCmd("bare-server", "Bare decision handler used as the baseline of bench decisions (internal)", func(cmd *cobra.Command) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		key := make([]byte, 32)
		rand.Read(key)
		var commit func(k, v []byte) error
		if syncDir != "" {
			l, err := store.OpenRawSyncLog(syncDir)
			if err != nil {
				return err
			}
			defer l.Close()
			commit = l.Put
		}
		srv := &http.Server{Handler: bareHandler(key, commit), ReadHeaderTimeout: 10 * time.Second}
		go func() { <-cmd.Context().Done(); srv.Close() }()
		if err := srv.Serve(ln); err != http.ErrServerClosed {
			return err
		}
		return nil
	})
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "listen address")
	cmd.Flags().StringVar(&syncDir, "sync-dir", "", "also commit each decision to raw Pebble on this directory with Sync before answering")
	return cmd
}

type bareDecisionReq struct {
	ClienteRef string `json:"cliente_ref"`
	Contexto   struct {
		Canal              string `json:"canal"`
		CampanaID          string `json:"campana_id"`
		AccionesPermitidas []int  `json:"acciones_permitidas"`
	} `json:"contexto"`
}

// bareHandler is the baseline's router; commit, when not nil, stores each
// decision (key, value) durably before the answer.
func bareHandler(key []byte, commit func(k, v []byte) error) http.Handler {
	sign := func(payload []byte) []byte {
		m := hmac.New(sha256.New, key)
		m.Write(payload)
		return m.Sum(nil)
	}
	enc := base64.RawURLEncoding
	var seq atomic.Uint64
	prefix := make([]byte, 8)
	rand.Read(prefix)
	r := httprouter.New()
	r.GET("/readyz", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) { w.WriteHeader(200) })
	r.POST("/v1/token", func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
		var in struct {
			ClientID string `json:"client_id"`
		}
		if json.NewDecoder(io.LimitReader(req.Body, 64<<10)).Decode(&in) != nil || in.ClientID == "" {
			http.Error(w, `{"codigo":"no_autenticado"}`, http.StatusUnauthorized)
			return
		}
		payload := binary.BigEndian.AppendUint64(nil, uint64(time.Now().Add(15*time.Minute).Unix()))
		payload = append(payload, in.ClientID...)
		tok := "ct1." + enc.EncodeToString(payload) + "." + enc.EncodeToString(sign(payload))
		writeBareJSON(w, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 900})
	})
	r.POST("/v1/decisiones", func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
		h := req.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(h, "Bearer ct1.")
		p, m, ok2 := strings.Cut(tok, ".")
		payload, err1 := enc.DecodeString(p)
		mac, err2 := enc.DecodeString(m)
		if !ok || !ok2 || err1 != nil || err2 != nil || len(payload) < 9 || !hmac.Equal(mac, sign(payload)) ||
			time.Now().Unix() >= int64(binary.BigEndian.Uint64(payload)) {
			http.Error(w, `{"codigo":"no_autenticado"}`, http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, 64<<10))
		var in bareDecisionReq
		if err != nil || json.Unmarshal(body, &in) != nil || in.ClienteRef == "" || len(in.ClienteRef) > 128 || in.Contexto.Canal == "" {
			http.Error(w, `{"codigo":"validacion"}`, http.StatusUnprocessableEntity)
			return
		}
		now := time.Now().UTC()
		d := engine.Decision{
			DecisionID: "bench.0123456789abcdef0123456789abcdef", Accion: 2, AccionNombre: "cupon b", Propension: 0.871,
			PoliticaVersion: "v42", CaducaEn: now.Add(7 * 24 * time.Hour), Motivo: "mayor margen esperado: cupon b",
		}
		if commit == nil {
			writeBareJSON(w, d)
			return
		}
		d.DecisionID = fmt.Sprintf("bench.%x%016x", prefix, seq.Add(1))
		ans, _ := json.Marshal(d)
		if commit([]byte("bench\x00dec\x00"+d.DecisionID), append(append(ans, '\n'), body...)) != nil {
			http.Error(w, `{"codigo":"no_disponible"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(ans, '\n'))
	})
	return r
}

func writeBareJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// child is a process started by the bench (the server under test or a
// baseline), stopped when the bench ends.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	base string // http://ADDR
}

// freeBenchAddr returns a loopback address with a port free right now.
func freeBenchAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startChild runs this binary with args (which make it listen on addr) and
// waits until GET /readyz answers 200, at most wait. Its output goes to
// logTo.
func startChild(args []string, addr string, logTo io.Writer, wait time.Duration) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logTo, logTo
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{}), base: "http://" + addr}
	go func() { cmd.Wait(); close(c.done) }()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return nil, fmt.Errorf("%s %s: exited before it was ready", exe, strings.Join(args, " "))
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := http.Get(c.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return c, nil
			}
		}
	}
	c.stop()
	return nil, fmt.Errorf("%s %s: not ready after %v", exe, strings.Join(args, " "), wait)
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop asks the child to end (SIGINT: coupond serve shuts down cleanly) and
// kills it after 30 s.
func (c *child) stop() {
	c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}
