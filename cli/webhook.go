package cli

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// newWebhookCmd is "coupond webhook": tools for the integrator's side of
// webhooks.
func newWebhookCmd() *cobra.Command {
	return groupCmd("webhook", "Webhook tools for integrators: a receiver that verifies signatures", webhookListenCmd())
}

func webhookListenCmd() *cobra.Command {
	var addr, secret string
	var count int
	var tolerance time.Duration
	cmd := &cobra.Command{
		Use:   "listen --secret whsec_… [--addr 127.0.0.1:9999]",
		Short: "Receive webhooks, verify their Standard Webhooks signature and print them",
		Long: "Listens on --addr, answers 204 to every POST whose webhook-signature verifies with --secret\n" +
			"(HMAC-SHA256 over \"<webhook-id>.<webhook-timestamp>.<body>\", timestamp within --tolerance of now)\n" +
			"and prints one line per delivery; a delivery that does not verify gets 401 and a line on stderr.\n" +
			"--count N exits after N verified deliveries. For development: put your own receiver in production.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := webhookKey(secret)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			var mu sync.Mutex
			verified := 0
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
				if r.Method != http.MethodPost || err != nil {
					http.Error(w, "POST a webhook", http.StatusMethodNotAllowed)
					return
				}
				id := r.Header.Get("webhook-id")
				mu.Lock()
				defer mu.Unlock()
				if err := verifyWebhook(key, id, r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body, time.Now(), tolerance); err != nil {
					fmt.Fprintf(errOut, "rejected %s: %v\n", id, err)
					http.Error(w, "signature does not verify", http.StatusUnauthorized)
					return
				}
				w.WriteHeader(http.StatusNoContent)
				if jsonFlag(cmd) {
					printJSONLine(out, map[string]any{"webhook_id": id, "verified": true, "body": json.RawMessage(body)})
				} else {
					fmt.Fprintf(out, "verified %s %s\n", id, body)
				}
				if verified++; count > 0 && verified >= count {
					cancel()
				}
			})}
			fmt.Fprintf(errOut, "listening on http://%s\n", ln.Addr())
			go func() {
				<-ctx.Done()
				shut, stop := context.WithTimeout(context.Background(), 5*time.Second)
				defer stop()
				srv.Shutdown(shut)
			}()
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:9999", "listen address")
	fl.StringVar(&secret, "secret", "", "the registration's secreto (whsec_…)")
	fl.IntVar(&count, "count", 0, "exit after this many verified deliveries (0: never)")
	fl.DurationVar(&tolerance, "tolerance", 5*time.Minute, "largest accepted distance between webhook-timestamp and now")
	fl.Bool("json", false, "one JSON object per delivery on stdout")
	cmd.MarkFlagRequired("secret")
	return cmd
}

// webhookKey decodes a whsec_ secret into its HMAC key.
func webhookKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(key) == 0 {
		return nil, errors.New("--secret: want whsec_ followed by base64, as PUT /v1/webhooks answered")
	}
	return key, nil
}

// verifyWebhook checks a Standard Webhooks signature: one of the
// space-separated "v1,<base64>" values of sigHeader must equal the
// HMAC-SHA256 of "<id>.<ts>.<body>" (constant-time compare), and ts (Unix
// seconds) must lie within tolerance of now. It is written from the
// specification, apart from the server's signing code, so that the README's
// walkthrough checks the one against the other.
func verifyWebhook(key []byte, id, ts, sigHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return errors.New("missing webhook-id or webhook-timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("timestamp %s is %s away from now", ts, d.Round(time.Second))
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.", id, ts)
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigHeader) {
		v, ok := strings.CutPrefix(s, "v1,")
		got, err := base64.StdEncoding.DecodeString(v)
		if ok && err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no v1 signature matches")
}

// printJSONLine writes v as one line of JSON.
func printJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
