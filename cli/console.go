package cli

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/console"
	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/server"
	"github.com/coupond/coupond/store"
)

// defaultConsoleURL is where "admin console login" points when no server
// tells it its console address.
const defaultConsoleURL = "http://127.0.0.1:8081"

// runAdminLine runs an admin command line against the live env, as the
// admin socket does: the console's actions are the operator's commands.
func runAdminLine(live *env) func(ctx context.Context, args []string, out io.Writer) error {
	return func(ctx context.Context, args []string, out io.Writer) error {
		if len(args) == 0 || args[0] != "admin" {
			return fmt.Errorf("not an admin command")
		}
		root := newRoot(&app{args: args, live: live})
		root.SetArgs(args)
		root.SetOut(out)
		var errOut bytes.Buffer
		root.SetErr(&errOut)
		return root.ExecuteContext(ctx)
	}
}

// startConsole serves the operator console on addr (its own listener,
// never the API's); behindTLS marks its session cookie Secure. Its
// listener has the API's limits (server.HTTPConfig: the header and idle
// timeouts, readTimeout for a whole request, 0 for the default, the header
// cap, the write stall bound) and holds at most console.MaxConns
// connections. It returns a stop function for shutdown, whose error says
// that requests were still running at its context's end. A listener that
// cannot be opened is an error, kept in e.svc.consoleErr for "admin
// console login" to tell.
func startConsole(addr string, behindTLS bool, readTimeout time.Duration, e *env) (stop func(context.Context) error, err error) {
	if addr == "" {
		return func(context.Context) error { return nil }, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		e.svc.consoleErr = fmt.Errorf("--console-addr %s failed at its start (%w)", addr, err)
		return nil, fmt.Errorf("--console-addr %s: %w", addr, err)
	}
	svc := e.svc
	con := console.New(console.Deps{
		Log: e.log, DB: e.db, Engine: svc.engine, API: svc.api, Batch: svc.batch, Webhooks: svc.webhooks, Now: e.now,
		Admin: runAdminLine(e), Secure: behindTLS,
		Backups: func(ctx context.Context) (*privacy.BackupList, error) { return svc.backups.List(ctx, false, nil) },
		Warnings: func(t *store.Tenant) ([]string, error) {
			_, _, _, w, err := svc.tenantStatus(t)
			return w, err
		},
		Guard: func(tenant string) (console.GuardState, bool) {
			g, err := svc.engine.Learner.Guard(tenant)
			if err != nil {
				return console.GuardState{}, false
			}
			return guardState(g), true
		},
	})
	svc.consoleURL = "http://" + ln.Addr().String()
	srv, ln := server.HTTPServerFor(con, ln, server.HTTPConfig{ReadTimeout: readTimeout, MaxConns: console.MaxConns}, e.log)
	go srv.Serve(ln)
	e.log.Info().Str("addr", ln.Addr().String()).Msg("console serving")
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		e.log.Warn().Str("addr", ln.Addr().String()).Msg("console reachable beyond this host without TLS: prefer 127.0.0.1 and an SSH tunnel")
	}
	return func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		con.Close()
		return err
	}, nil
}

// consoleCmd is "coupond admin console": sign-in links and sessions.
func consoleCmd(a *app) *cobra.Command {
	return groupCmd("console", "Operator console: one-time sign-in links, sign out every session, its audit log", consoleLoginCmd(a), consoleLogoutCmd(a), consoleAuditCmd(a))
}

// consoleLoginCmd prints a one-time sign-in link for the console.
func consoleLoginCmd(a *app) *cobra.Command {
	var base string
	cmd := a.envCmd("login", "Print a one-time sign-in link for the console (valid 10 minutes, once)", cobra.NoArgs, func(cmd *cobra.Command, _ []string, e *env) error {
		u := base
		if !cmd.Flags().Changed("url") && e.svc.consoleURL != "" {
			u = e.svc.consoleURL
		}
		if a.live != nil && e.svc.consoleErr != nil {
			return fmt.Errorf("the running server serves no console: %v: free that port, or restart serve with another --console-addr, to sign in", e.svc.consoleErr)
		}
		if a.live != nil && e.svc.consoleURL == "" {
			return fmt.Errorf("the running server serves no console (its --console-addr is empty): restart serve with --console-addr %s to sign in", strings.TrimPrefix(defaultConsoleURL, "http://"))
		}
		u = strings.TrimSuffix(u, "/")
		pu, err := parseConsoleURL(u)
		if err != nil {
			return err
		}
		tok, err := console.NewLink(e.db, e.now())
		if err != nil {
			return err
		}
		link := u + "/login?t=" + tok
		e.log.Info().Msg("console sign-in link issued")
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), map[string]any{"url": link, "expires_at": e.now().UTC().Add(console.LinkTTL)})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s\nOpen it within %s; it works once.", link, console.LinkTTL)
		if fwd := sshForward(pu, e.svc.consoleURL); fwd != "" {
			fmt.Fprintf(cmd.OutOrStdout(), " On a VM, forward the port first: ssh -L %s user@vm", fwd)
		}
		fmt.Fprintln(cmd.OutOrStdout())
		if a.live == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "No coupond serve is running on this data dir: the link works once one runs, within %s.\n", console.LinkTTL)
		}
		return nil
	})
	cmd.Flags().StringVar(&base, "url", defaultConsoleURL, "the console's base URL as your browser reaches it (default: the running server's console address; env COUPOND_URL)")
	return cmd
}

// parseConsoleURL parses u, the console's base URL of "admin console
// login": http or https with a host, a port (if any) from 1 to 65535, and
// no user, query or fragment, which the link's "/login?t=TOKEN" appended
// to it would land in (a "#x" base put the token in the fragment: a link
// that could never sign in). The error names --url.
func parseConsoleURL(u string) (*url.URL, error) {
	bad := func(why string) error {
		return fmt.Errorf("--url %q: want the console's http or https base URL such as %s%s", u, defaultConsoleURL, why)
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, bad("")
	}
	if pu.User != nil || pu.RawQuery != "" || pu.ForceQuery || strings.Contains(u, "#") {
		return nil, bad(", without user, query or fragment")
	}
	if p := pu.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, bad(", with a port from 1 to 65535")
		}
	}
	return pu, nil
}

// sshForward is the -L argument that brings the console to link's address
// on the operator's machine: link's port there, to the console's port on
// the VM (the running server's, from serverURL; without a server, link's).
// It is "" when link is not a loopback address, which a browser reaches
// without a tunnel (a TLS proxy's name, say).
func sshForward(link *url.URL, serverURL string) string {
	host := link.Hostname()
	if ip, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !ip.IsLoopback()) {
		return ""
	}
	local := cmp.Or(link.Port(), "80")
	if link.Scheme == "https" {
		local = cmp.Or(link.Port(), "443")
	}
	remote := local
	if su, err := url.Parse(serverURL); serverURL != "" && err == nil && su.Port() != "" {
		remote = su.Port()
	}
	return local + ":127.0.0.1:" + remote
}

// consoleLogoutCmd ends every console session and unused sign-in link.
func consoleLogoutCmd(a *app) *cobra.Command {
	var all bool
	cmd := leafCmd("logout --all", "End every console session and unused sign-in link", func(cmd *cobra.Command) error {
		if !all {
			return fmt.Errorf("--all is required: sessions are not named, so logout ends them all")
		}
		return a.withEnv(cmd, func(e *env) error {
			n, err := console.RevokeAll(e.db)
			if err != nil {
				return err
			}
			e.log.Info().Int("sessions", n).Msg("console sessions revoked")
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]int{"sessions_ended": n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d console sessions ended\n", n)
			return nil
		})
	})
	cmd.Flags().BoolVar(&all, "all", false, "end every session")
	return cmd
}

// consoleAuditCmd prints the console's operator audit log.
func consoleAuditCmd(a *app) *cobra.Command {
	var tenant string
	var last int
	cmd := a.envCmd("audit [--tenant ID]", "The console's operator audit log: who (session) did what action on which tenant, when, with what outcome", cobra.NoArgs, func(cmd *cobra.Command, _ []string, e *env) error {
		if last < 1 {
			return fmt.Errorf("--last: want at least 1, got %d", last)
		}
		if _, ok := e.db.Tenant(tenant); tenant != "" && !ok {
			return fmt.Errorf("no tenant %q", tenant)
		}
		entries, err := console.Audit(e.db, tenant, last)
		if err != nil {
			return err
		}
		if entries == nil {
			entries = []console.AuditEntry{}
		}
		return printList(cmd, entries, entries, "AT\tSESSION\tTENANT\tACTION\tOUTCOME\tCOMMAND", func(x console.AuditEntry) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", x.At.Format(time.RFC3339), x.Session, x.Tenant, x.Action, x.Outcome, strings.Join(x.Command, " "))
		})
	})
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's entries")
	cmd.Flags().IntVar(&last, "last", 1000, "at most this many entries (the latest)")
	cmd.PreRunE = refuseEmptyTenant(&tenant)
	return cmd
}

// guardState is the console's view of the policy guard: which policy the
// tenant runs and the estimates behind it (policy.GuardStatus, as admin
// tenant show prints it).
func guardState(g policy.GuardStatus) console.GuardState {
	detail := fmt.Sprintf("the learned policy is estimated at %.2f MXN per decision over %.0f effective rewards; %d switch(es)",
		cents(g.Policy), g.Rewards, g.Switches)
	if g.Rewards == 0 {
		detail = fmt.Sprintf("the learned policy has %s; %d switch(es)", noGuardEstimate, g.Switches)
	}
	for _, b := range g.Baselines {
		name := "never-send"
		if b.Accion != 0 {
			name = fmt.Sprintf("always action %d", b.Accion)
		}
		detail += fmt.Sprintf("; %s %.2f MXN (policy %+.2f ± %s)", name, cents(b.Value), cents(b.Diff), seText(b.SE))
	}
	if gt := g.Gate; gt != nil {
		if gt.N == 0 {
			detail += fmt.Sprintf("; send gate %s: no decision tested against never-send yet", gt.State)
		} else {
			detail += fmt.Sprintf("; send gate %s: choice − never-send %+.2f MXN (SE %s)", gt.State, cents(gt.Diff), seText(gt.SE))
		}
		for _, b := range gt.Bands {
			detail += fmt.Sprintf("; %s tickets a year %s, %.0f %% of choices sent", b.Tickets, b.State, 100*b.Sending)
		}
	}
	if !g.Active {
		state := "off, the learned policy decides"
		if g.Gate.Open() {
			state = "off, the send gate is open: the learned policy's choices go out"
		} else if g.Gate != nil {
			state = "off, the send gate tests the learned policy's choices against never-send"
		}
		return console.GuardState{State: state, Detail: detail}
	}
	base := "never-send"
	if g.Baseline != 0 {
		base = fmt.Sprintf("always action %d", g.Baseline)
	}
	return console.GuardState{State: "active, exploiting " + base, Detail: detail, Alert: true}
}
