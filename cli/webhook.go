package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/batch"
	"github.com/coupond/coupond/client"
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
			"and prints one line per delivery; a delivery that does not verify gets 401 and a line on stderr, and a\n" +
			"retry of one already received (the same webhook-id) gets 204 and a line on stderr, and is not counted.\n" +
			"--count N exits after N verified deliveries. For development: put your own receiver in production.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := batch.ParseWebhookSecret(secret); err != nil || !strings.HasPrefix(secret, "whsec_") {
				return errors.New("--secret: want whsec_ followed by base64, as PUT /v1/webhooks answered")
			}
			if err := checkAtLeast(flagMin{"count", count, 0}); err != nil {
				return err
			}
			if tolerance <= 0 {
				return fmt.Errorf("--tolerance: want a positive duration such as 5m, got %s", tolerance)
			}
			if err := checkListenAddr("addr", addr); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--addr %s: %w", addr, err)
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			verified := 0
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			h := webhookReceiver(secret, tolerance, time.Now, errOut, func(id string, body []byte) {
				if jsonFlag(cmd) {
					printJSONLine(out, deliveryJSON(id, body))
				} else {
					fmt.Fprintf(out, "verified %s %s\n", id, body)
				}
				if verified++; count > 0 && verified >= count {
					cancel()
				}
			})
			srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: h}
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
	fl.StringVar(&secret, "secret", "", "the registration's secreto (whsec_…); prefer its variable, which other users cannot read in ps")
	fl.IntVar(&count, "count", 0, "exit after this many verified deliveries (0: never)")
	fl.DurationVar(&tolerance, "tolerance", 5*time.Minute, "largest accepted distance between webhook-timestamp and now")
	fl.Bool("json", false, "one JSON object per delivery on stdout")
	cmd.MarkFlagRequired("secret")
	return cmd
}

// webhookReceiver is the listen command's handler: a POST whose Standard
// Webhooks signature verifies with secret (client.VerifyWebhookSignature,
// timestamp within tolerance of now()) gets 204 and is passed to verified;
// any other request gets 401 (405 for another method) and a line on
// errOut. A verified delivery whose webhook-id was already received (a
// retry of one whose 204 the sender did not get) gets 204 and a line on
// errOut, and is not passed on again: receivers deduplicate by
// webhook-id, and this one shows how. It remembers the last
// maxSeenWebhooks ids. Deliveries are handled one at a time.
func webhookReceiver(secret string, tolerance time.Duration, now func() time.Time, errOut io.Writer, verified func(id string, body []byte)) http.Handler {
	var mu sync.Mutex
	seen := map[string]bool{}
	var order []string
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if r.Method != http.MethodPost || err != nil {
			http.Error(w, "POST a webhook", http.StatusMethodNotAllowed)
			return
		}
		id := r.Header.Get("webhook-id")
		mu.Lock()
		defer mu.Unlock()
		if err := client.VerifyWebhookSignature(secret, r.Header, body, now(), tolerance); err != nil {
			fmt.Fprintf(errOut, "rejected %q: %v\n", id, err)
			http.Error(w, "signature does not verify", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		if seen[id] {
			fmt.Fprintf(errOut, "repeat of %q (a retry): already received, not counted\n", id)
			return
		}
		if seen[id] = true; len(order) == maxSeenWebhooks {
			delete(seen, order[0])
			order = order[1:]
		}
		order = append(order, id)
		verified(id, body)
	})
}

// maxSeenWebhooks is how many webhook-ids the listen command remembers to
// recognise a retry.
const maxSeenWebhooks = 10_000

// deliveryJSON is the --json line of a verified delivery: its body as JSON
// ("body"), or as a string ("body_text") when it is not JSON, which
// encoding it raw would refuse.
func deliveryJSON(id string, body []byte) map[string]any {
	v := map[string]any{"webhook_id": id, "verified": true}
	if json.Valid(body) {
		v["body"] = json.RawMessage(body)
	} else {
		v["body_text"] = string(body)
	}
	return v
}

// printJSONLine writes v as one line of JSON.
func printJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
