package cli

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

func newAdminCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Operator commands (work with the server running or stopped)",
	}
	cmd.PersistentFlags().Bool("json", false, "machine-readable output: one JSON value on stdout")
	tenant := groupCmd("tenant", "Create, list, show, configure and delete tenants", tenantCreateCmd(a), tenantListCmd(a), tenantShowCmd(a), tenantSetCmd(a),
		withDeadline(tenantDeleteCmd(a), longAdmin), tenantDeletionsCmd(a))
	cred := groupCmd("credential", "Create, list, revoke and rotate client credentials", credCreateCmd(a), credListCmd(a), credRevokeCmd(a), credRotateCmd(a))
	clock := groupCmd("clock", "Show and advance a sandbox tenant's clock", clockShowCmd(a), withDeadline(clockAdvanceCmd(a), longAdmin))
	cmd.AddCommand(tenant, cred, clock, auditCmd(a))
	cmd.AddCommand(extraAdminCmds(a)...)
	return cmd
}

func jsonFlag(cmd *cobra.Command) bool {
	v, _ := cmd.Flags().GetBool("json")
	return v
}

// tenantView is the admin (English) view of a tenant.
type tenantView struct {
	Tenant    string         `json:"tenant"`
	Sandbox   bool           `json:"sandbox"`
	CreatedAt time.Time      `json:"created_at"`
	Now       time.Time      `json:"now"`
	Settings  settingsView   `json:"settings"`
	Usage     map[string]any `json:"usage,omitempty"`
	// Guard is the policy guard's state and estimates (shown with usage).
	Guard    *policy.GuardStatus `json:"policy_guard,omitempty"`
	Quality  map[string]any      `json:"data_quality,omitempty"`
	Warnings []string            `json:"warnings"`
}

type settingsView struct {
	Shadow            bool    `json:"shadow"`
	Paused            bool    `json:"paused"`
	RewardWindow      string  `json:"reward_window"`
	RewardGrace       string  `json:"reward_grace"`
	ControlShare      float64 `json:"control_share"`
	ControlKind       string  `json:"control_kind"`
	QuotaDecisionsDay int64   `json:"quota_decisions_day"`
	QuotaEventsDay    int64   `json:"quota_events_day"`
	OptoutPenaltyMXN  float64 `json:"optout_penalty_mxn"`
	RateLimits        bool    `json:"rate_limits"`
}

// viewTenant is tenant t's settings, usage, data quality, guard and open
// warnings.
func viewTenant(e *env, t *store.Tenant) (tenantView, error) {
	s := t.Settings
	v := tenantView{
		Tenant: t.ID, Sandbox: t.Sandbox, CreatedAt: t.CreatedAt, Now: t.Now(e.now()),
		Settings: settingsView{
			Shadow: s.Shadow, Paused: s.Paused, RewardWindow: formatDays(s.RewardWindow), RewardGrace: formatDays(s.RewardGrace),
			ControlShare: s.ControlShare, ControlKind: s.ControlKind, QuotaDecisionsDay: s.QuotaDecisionsDay,
			QuotaEventsDay: s.QuotaEventsDay, OptoutPenaltyMXN: float64(s.OptoutPenaltyCents) / 100, RateLimits: s.RateLimits,
		},
	}
	usage, quality, guard, warnings, err := e.svc.tenantStatus(t)
	if err != nil {
		return v, err
	}
	v.Usage, v.Quality, v.Guard, v.Warnings = usage, quality, &guard, warnings
	return v, nil
}

func tenantCreateCmd(a *app) *cobra.Command {
	var sandbox bool
	cmd := a.envCmd("create ID", "Create a tenant (--sandbox gives it a test clock)", cobra.ExactArgs(1), func(cmd *cobra.Command, args []string, e *env) error {
		now := e.now().UTC()
		t := &store.Tenant{ID: args[0], CreatedAt: now, Sandbox: sandbox, Settings: store.DefaultSettings()}
		if sandbox {
			t.ClockNow = now
		}
		if err := e.db.CreateTenant(t); err != nil {
			if errors.Is(err, store.ErrExists) {
				return tenantTakenError(e.db, args[0])
			}
			return err
		}
		e.log.Info().Str("tenant", t.ID).Bool("sandbox", sandbox).Msg("tenant created")
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), map[string]any{"tenant": t.ID, "sandbox": t.Sandbox, "created_at": t.CreatedAt})
		}
		kind := ""
		if sandbox {
			kind = " (sandbox, test clock at " + now.Format(time.RFC3339) + ")"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "tenant %s created%s\n", t.ID, kind)
		return nil
	})
	cmd.Flags().BoolVar(&sandbox, "sandbox", false, "sandbox tenant with a test clock moved by 'admin clock advance'")
	cmd.Annotations = map[string]string{createsDataDir: "yes"}
	// A refused id must not create the data dir the command may create.
	cmd.PreRunE = func(_ *cobra.Command, args []string) error {
		if !store.ValidTenantID(args[0]) {
			return fmt.Errorf("invalid tenant id %q: want 1 to 32 of a-z 0-9 _ -, starting with a letter or digit", args[0])
		}
		return nil
	}
	return cmd
}

func tenantListCmd(a *app) *cobra.Command {
	return a.envCmd("list", "List tenants with their state", cobra.NoArgs, func(cmd *cobra.Command, _ []string, e *env) error {
		views := []tenantView{}
		for _, t := range e.db.Tenants() {
			v, err := viewTenant(e, t)
			if err != nil {
				return err
			}
			views = append(views, v)
		}
		return printList(cmd, views, views, "TENANT\tKIND\tSTATE\tSHADOW\tNOW\tWARNINGS", func(v tenantView) string {
			kind, state := "live", "active"
			if v.Sandbox {
				kind = "sandbox"
			}
			if v.Settings.Paused {
				state = "paused"
			}
			return fmt.Sprintf("%s\t%s\t%s\t%v\t%s\t%d", v.Tenant, kind, state, v.Settings.Shadow, v.Now.Format(time.RFC3339), len(v.Warnings))
		})
	})
}

func tenantShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a tenant's state, settings, usage, data quality and warnings",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withTenant(cmd, args[0], func(e *env, t *store.Tenant) error {
				return showTenant(cmd, e, t)
			})
		},
	}
}

// showTenant prints tenant t as "tenant show" does: settings, usage, data
// quality, the guard and the open warnings (viewTenant).
func showTenant(cmd *cobra.Command, e *env, t *store.Tenant) error {
	v, err := viewTenant(e, t)
	if err != nil {
		return err
	}
	if jsonFlag(cmd) {
		return printJSON(cmd.OutOrStdout(), v)
	}
	return printTenant(cmd.OutOrStdout(), v)
}

func printTenant(w io.Writer, v tenantView) error {
	kind := "live"
	if v.Sandbox {
		kind = "sandbox (test clock)"
	}
	fmt.Fprintf(w, "tenant:   %s\nkind:     %s\ncreated:  %s\nnow:      %s\n", v.Tenant, kind, v.CreatedAt.Format(time.RFC3339), v.Now.Format(time.RFC3339))
	s := v.Settings
	fmt.Fprintf(w, "settings: shadow=%v paused=%v rate-limits=%v reward-window=%s reward-grace=%s\n", s.Shadow, s.Paused, s.RateLimits, s.RewardWindow, s.RewardGrace)
	fmt.Fprintf(w, "          control-share=%g control-kind=%s optout-penalty-mxn=%.2f\n", s.ControlShare, s.ControlKind, s.OptoutPenaltyMXN)
	fmt.Fprintf(w, "          quota-decisions-day=%d quota-events-day=%d\n", s.QuotaDecisionsDay, s.QuotaEventsDay)
	for _, sec := range []struct {
		name string
		m    map[string]any
	}{{"usage", v.Usage}, {"data quality", v.Quality}} {
		if len(sec.m) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s:\n", sec.name)
		for _, k := range slices.Sorted(maps.Keys(sec.m)) {
			fmt.Fprintf(w, "  %-36s %v\n", k, sec.m[k])
		}
	}
	if v.Guard != nil {
		printGuard(w, *v.Guard)
	}
	if len(v.Warnings) == 0 {
		fmt.Fprintln(w, "warnings: none")
	} else {
		fmt.Fprintln(w, "warnings:")
		for _, x := range v.Warnings {
			fmt.Fprintf(w, "  - %s\n", x)
		}
	}
	return nil
}

func tenantSetCmd(a *app) *cobra.Command {
	var sf tenantSetFlags
	cmd := a.envCmd("set ID", "Change the settings the operator owns", cobra.ExactArgs(1), func(cmd *cobra.Command, args []string, e *env) error {
		t, err := e.updateTenant(args[0], func(t *store.Tenant) error {
			return sf.apply(cmd.Flags(), t, e.now())
		})
		if err != nil {
			return err
		}
		e.log.Info().Str("tenant", t.ID).Strs("settings", givenSettings(cmd.LocalNonPersistentFlags())).Msg("tenant settings changed")
		if !t.Settings.Paused && e.svc != nil {
			e.svc.batch.Wake() // the jobs held while it was paused
		}
		// The tenant as "tenant show" prints it, warnings included: without
		// them the answer to "--paused true" read "warnings: none" (and
		// "warnings":[]) for a tenant that now has one, and the console's
		// actions show this output.
		return showTenant(cmd, e, t)
	})
	sf.register(cmd.Flags())
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error { return anySetting(cmd.LocalNonPersistentFlags()) }
	return cmd
}

// anySetting returns an error listing the settings when the flags of
// "admin tenant set" (f, each a setting, and help) give none: the command
// would change nothing.
func anySetting(f *pflag.FlagSet) error {
	if len(givenSettings(f)) > 0 {
		return nil
	}
	var names []string
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Name != "help" {
			names = append(names, "--"+fl.Name)
		}
	})
	return fmt.Errorf("nothing to change: give at least one of %s", strings.Join(names, ", "))
}

// givenSettings lists the settings flags of "admin tenant set" given in f
// as name=value (the log's record of what changed; none is a secret).
func givenSettings(f *pflag.FlagSet) []string {
	var given []string
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed && fl.Name != "help" {
			given = append(given, fl.Name+"="+fl.Value.String())
		}
	})
	return given
}

// tenantSetFlags are the settings "admin tenant set" may change; only the
// flags given on the command line change anything.
type tenantSetFlags struct {
	shadow, paused, rateLimits, window, grace, controlKind string
	controlShare, penalty                                  float64
	quotaDec, quotaEv                                      int64
}

// register defines the flags of "admin tenant set". A flag has no default:
// a setting it does not give stays as it is. Its usage ends with a new
// tenant's value (store.DefaultSettings), and it carries the annotation
// keepsSetting, so that "docs flags" shows no default for it either (a
// float's zero value read as "--control-share defaults to 0").
func (sf *tenantSetFlags) register(f *pflag.FlagSet) {
	d := store.DefaultSettings()
	onOff := map[bool]string{true: "on", false: "off"}
	f.StringVar(&sf.shadow, "shadow", "", "shadow mode: on or off")
	f.StringVar(&sf.paused, "paused", "", "pause the tenant: true or false (its requests, signed result links included, answer 503 inquilino_pausado; its queued batch jobs and webhook deliveries wait for the resume)")
	f.StringVar(&sf.window, "reward-window", "", "reward window, 1h to 365d, e.g. 28d")
	f.StringVar(&sf.grace, "reward-grace", "", "grace period for late events after the window, up to 365d, e.g. 2d")
	f.Float64Var(&sf.controlShare, "control-share", 0, "share of customers in the control group, 0 to 0.5")
	f.StringVar(&sf.controlKind, "control-kind", "", "control group kind: nada or regla_actual")
	f.Int64Var(&sf.quotaDec, "quota-decisions-day", 0, "daily decision quota (0 = none)")
	f.Int64Var(&sf.quotaEv, "quota-events-day", 0, "daily event quota (0 = none)")
	f.Float64Var(&sf.penalty, "optout-penalty-mxn", 0, "reward penalty of an opt-out in the window, MXN")
	f.StringVar(&sf.rateLimits, "rate-limits", "", "per-credential rate limits: on or off (off only for sandbox tenants)")
	for name, v := range map[string]string{
		"shadow": onOff[d.Shadow], "paused": strconv.FormatBool(d.Paused), "rate-limits": onOff[d.RateLimits],
		"reward-window": formatDays(d.RewardWindow), "reward-grace": formatDays(d.RewardGrace),
		"control-share": strconv.FormatFloat(d.ControlShare, 'g', -1, 64), "control-kind": d.ControlKind,
		"quota-decisions-day": strconv.FormatInt(d.QuotaDecisionsDay, 10), "quota-events-day": strconv.FormatInt(d.QuotaEventsDay, 10),
		"optout-penalty-mxn": strconv.FormatFloat(float64(d.OptoutPenaltyCents)/100, 'f', -1, 64),
	} {
		fl := f.Lookup(name)
		fl.Usage += "; a new tenant's: " + v
		f.SetAnnotation(name, keepsSetting, []string{"true"})
	}
}

// keepsSetting annotates a flag that changes a setting only when given:
// it has no default ("docs flags" leaves the column empty).
const keepsSetting = "keeps-setting"

// apply checks each flag given in f and sets its setting on t; the first
// bad value is the error, naming its flag.
func (sf *tenantSetFlags) apply(f *pflag.FlagSet, t *store.Tenant, now time.Time) error {
	if err := sf.applySwitches(f, t, now); err != nil {
		return err
	}
	if err := sf.applyRewards(f, &t.Settings); err != nil {
		return err
	}
	return sf.applyQuotas(f, &t.Settings)
}

// applySwitches sets shadow mode, pause and rate limits. Switching shadow
// mode on (from off) records when, on the tenant's clock at now.
func (sf *tenantSetFlags) applySwitches(f *pflag.FlagSet, t *store.Tenant, now time.Time) error {
	s := &t.Settings
	if f.Changed("shadow") {
		v, err := parseOnOff("shadow", sf.shadow)
		if err != nil {
			return err
		}
		if v && !s.Shadow {
			s.ShadowSince = t.Now(now)
		}
		s.Shadow = v
	}
	if f.Changed("paused") {
		v, err := strconv.ParseBool(sf.paused)
		if err != nil {
			return fmt.Errorf("--paused: want true or false, got %q", sf.paused)
		}
		s.Paused = v
	}
	if f.Changed("rate-limits") {
		v, err := parseOnOff("rate-limits", sf.rateLimits)
		if err != nil {
			return err
		}
		if !v && !t.Sandbox {
			return fmt.Errorf("--rate-limits off is only for sandbox tenants")
		}
		s.RateLimits = v
	}
	return nil
}

// maxRewardSpan bounds the reward window and its grace: a year each keeps
// every due time a decision computes from them within the range stored
// times have.
const maxRewardSpan = 365 * 24 * time.Hour

// applyRewards sets the reward window and grace and the control group.
func (sf *tenantSetFlags) applyRewards(f *pflag.FlagSet, s *store.Settings) error {
	if f.Changed("reward-window") {
		d, err := parseDays(sf.window)
		if err != nil || d < time.Hour || d > maxRewardSpan {
			return fmt.Errorf("--reward-window: want a duration from 1h to 365d such as 28d, got %q", sf.window)
		}
		s.RewardWindow = d
	}
	if f.Changed("reward-grace") {
		d, err := parseDays(sf.grace)
		if err != nil || d < 0 || d > maxRewardSpan {
			return fmt.Errorf("--reward-grace: want a duration from 0 to 365d such as 2d, got %q", sf.grace)
		}
		s.RewardGrace = d
	}
	if f.Changed("control-share") {
		if !(sf.controlShare >= 0 && sf.controlShare <= 0.5) { // NaN too
			return fmt.Errorf("--control-share: want 0 to 0.5, got %g", sf.controlShare)
		}
		s.ControlShare = sf.controlShare
	}
	if f.Changed("control-kind") {
		if sf.controlKind != "nada" && sf.controlKind != "regla_actual" {
			return fmt.Errorf("--control-kind: want nada or regla_actual, got %q", sf.controlKind)
		}
		s.ControlKind = sf.controlKind
	}
	return nil
}

// applyQuotas sets the daily quotas and the opt-out penalty.
func (sf *tenantSetFlags) applyQuotas(f *pflag.FlagSet, s *store.Settings) error {
	if f.Changed("quota-decisions-day") {
		if sf.quotaDec < 0 {
			return fmt.Errorf("--quota-decisions-day: want >= 0 (0 = none)")
		}
		s.QuotaDecisionsDay = sf.quotaDec
	}
	if f.Changed("quota-events-day") {
		if sf.quotaEv < 0 {
			return fmt.Errorf("--quota-events-day: want >= 0 (0 = none)")
		}
		s.QuotaEventsDay = sf.quotaEv
	}
	if f.Changed("optout-penalty-mxn") {
		cents := math.Round(sf.penalty * 100)
		if !(sf.penalty >= 0 && sf.penalty <= 1e9) || math.Abs(sf.penalty*100-cents) > 1e-6 { // NaN too
			return fmt.Errorf("--optout-penalty-mxn: want MXN from 0 to 1000000000 with at most two decimals, got %g", sf.penalty)
		}
		s.OptoutPenaltyCents = int64(cents)
	}
	return nil
}

func parseOnOff(flag, v string) (bool, error) {
	switch strings.ToLower(v) {
	case "on", "true":
		return true, nil
	case "off", "false":
		return false, nil
	}
	return false, fmt.Errorf("--%s: want on or off, got %q", flag, v)
}

// parseDays parses a Go duration that may also use d for days ("7d",
// "1d12h", "36h"): the days a decimal number ("1.5d", "-1d"), then no sign
// ("1d-1h" read as 23h, and "1_0d", "0x1p3d" or "1e1d" as 10, 8 and 10
// days, strconv.ParseFloat's syntaxes). A duration beyond time.Duration's
// range (about 292 years) is an error that says so, not a wrapped-around
// value.
func parseDays(s string) (time.Duration, error) {
	in := s
	var total time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		days, err := strconv.ParseFloat(s[:i], 64)
		if err != nil || !decimalNumber(s[:i]) || strings.HasPrefix(s[i+1:], "-") || strings.HasPrefix(s[i+1:], "+") {
			return 0, fmt.Errorf("bad duration %q", in)
		}
		if math.Abs(days) > maxDays {
			return 0, fmt.Errorf("duration %q is too long (at most %d days)", in, int(maxDays))
		}
		total = time.Duration(days * float64(24*time.Hour))
		s = s[i+1:]
		if s == "" {
			return total, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q", in)
	}
	sum := total + d
	if (d > 0 && sum < total) || (d < 0 && sum > total) {
		return 0, fmt.Errorf("duration %q is too long (at most %d days)", in, int(maxDays))
	}
	return sum, nil
}

// decimalNumber reports whether s is digits with an optional leading '-'
// and an optional fraction: "7", "1.5", "-1".
func decimalNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	digits := func(x string) bool { return !strings.ContainsFunc(x, func(r rune) bool { return r < '0' || r > '9' }) }
	return whole != "" && digits(whole) && digits(frac)
}

// maxDays is the most days a time.Duration holds, whole days only.
const maxDays = float64(math.MaxInt64 / int64(24*time.Hour))

func formatDays(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func credCreateCmd(a *app) *cobra.Command {
	var tenant, name, scopes string
	cmd := leafCmd("create --tenant ID --name NAME --scopes a,b", "Create a client credential; prints the secret once", func(cmd *cobra.Command) error {
		list, err := parseScopeList(scopes)
		if err != nil {
			return err
		}
		if err := checkCredentialName(name); err != nil {
			return err
		}
		return a.withTenant(cmd, tenant, func(e *env, _ *store.Tenant) error {
			c, secret, err := e.createCredential(tenant, name, list)
			if err != nil {
				return err
			}
			e.log.Info().Str("tenant", tenant).Str("client_id", c.ClientID).Strs("scopes", list).Msg("credential created")
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"client_id": c.ClientID, "client_secret": secret, "scopes": list, "tenant": tenant})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "client_id:     %s\nclient_secret: %s\nscopes:        %s\ntenant:        %s\nThe secret is shown only this once; store it now.\n",
				c.ClientID, secret, strings.Join(list, " "), tenant)
			return nil
		})
	})
	tenantFlag(cmd, &tenant)
	cmd.Flags().StringVar(&name, "name", "", "name of the integrating system")
	cmd.Flags().StringVar(&scopes, "scopes", "", "comma-separated scopes: "+strings.Join(scopeList(), ","))
	cmd.MarkFlagRequired("name")
	cmd.MarkFlagRequired("scopes")
	return cmd
}

// createCredential stores a new credential of tenant with name and scopes
// and returns it with its secret, which only its hash keeps.
func (e *env) createCredential(tenant, name string, scopes []string) (*store.Credential, string, error) {
	secret := "cs_" + randomToken(32)
	c := &store.Credential{
		ClientID: "ci_" + randomToken(15), Tenant: tenant, Name: name, Scopes: scopes,
		SecretHash: store.HashSecret(secret), CreatedAt: e.now().UTC(),
	}
	return c, secret, e.db.CreateCredential(c)
}

// checkCredentialName checks --name: 1 to 128 characters of UTF-8 text,
// not all blank, without control characters or bidirectional controls
// (listings print it to a terminal and into a tab-separated table, where a
// right-to-left override reorders the rest of the row).
func checkCredentialName(name string) error {
	if n := utf8.RuneCountInString(name); n == 0 || n > 128 || strings.TrimSpace(name) == "" {
		return fmt.Errorf("--name: want 1 to 128 characters, not all blank")
	}
	control := func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }
	if !utf8.ValidString(name) || strings.ContainsFunc(name, control) {
		return fmt.Errorf("--name: want text without control characters (tab, newline, escape, bidirectional overrides) and in UTF-8, got %q", name)
	}
	return nil
}

func parseScopeList(s string) ([]string, error) {
	known := map[string]bool{}
	for _, n := range scopeList() {
		known[n] = true
	}
	var out []string
	seen := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" || seen[p] {
			continue
		}
		if !known[p] {
			return nil, fmt.Errorf("--scopes: unknown scope %q (known: %s)", p, strings.Join(scopeList(), ", "))
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--scopes: give at least one scope")
	}
	return out, nil
}

// randomToken returns n random bytes, base64url-encoded.
func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

type credView struct {
	ClientID  string     `json:"client_id"`
	Tenant    string     `json:"tenant"`
	Name      string     `json:"name"`
	Scopes    []string   `json:"scopes"`
	State     string     `json:"state"`
	CreatedAt time.Time  `json:"created_at"`
	RotatedAt *time.Time `json:"rotated_at,omitempty"`
	GraceEnds *time.Time `json:"previous_secret_valid_until,omitempty"`
	LastUsed  *time.Time `json:"last_used"`
}

func viewCred(c *store.Credential, now time.Time) credView {
	v := credView{ClientID: c.ClientID, Tenant: c.Tenant, Name: c.Name, Scopes: c.Scopes, State: "active", CreatedAt: c.CreatedAt}
	switch {
	case c.Revoked:
		v.State = "revoked"
	case c.Suspended:
		v.State = "suspended"
	}
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	v.RotatedAt, v.LastUsed = opt(c.RotatedAt), opt(c.LastUsed)
	if now.Before(c.PrevUntil) {
		v.GraceEnds = opt(c.PrevUntil)
	}
	return v
}

func credListCmd(a *app) *cobra.Command {
	return a.tenantCmd("list --tenant ID", "List a tenant's credentials (never their secrets)", func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		views := []credView{}
		for _, c := range e.db.Credentials(t.ID) {
			views = append(views, viewCred(c, e.now()))
		}
		return printList(cmd, views, views, "CLIENT_ID\tNAME\tSTATE\tSCOPES\tLAST_USED", func(v credView) string {
			last := "never"
			if v.LastUsed != nil {
				last = v.LastUsed.Format(time.RFC3339)
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", v.ClientID, v.Name, v.State, strings.Join(v.Scopes, ","), last)
		})
	})
}

func credRevokeCmd(a *app) *cobra.Command {
	return a.envCmd("revoke CLIENT_ID", "Revoke a credential now: its tokens stop working at once", cobra.ExactArgs(1), func(cmd *cobra.Command, args []string, e *env) error {
		c, err := e.updateCredential(args[0], "revoked", func(c *store.Credential) error {
			if !c.Revoked {
				c.Revoked, c.RevokedAt = true, e.now().UTC()
			}
			return nil
		})
		if err != nil {
			return err
		}
		if jsonFlag(cmd) {
			return printJSON(cmd.OutOrStdout(), viewCred(c, e.now()))
		}
		fmt.Fprintf(cmd.OutOrStdout(), "credential %s revoked\n", c.ClientID)
		return nil
	})
}

// maxRotationGrace bounds how long a rotated secret keeps working: a
// rotation whose old secret outlives a quarter is no rotation.
const maxRotationGrace = 90 * 24 * time.Hour

func credRotateCmd(a *app) *cobra.Command {
	var grace string
	cmd := &cobra.Command{
		Use:   "rotate CLIENT_ID [--grace 24h]",
		Short: "Issue a new secret; the old one and its tokens keep working for the grace period",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := parseDays(grace)
			if err != nil || g < 0 || g > maxRotationGrace {
				return fmt.Errorf("--grace: want a duration from 0 to 90d such as 24h, got %q", grace)
			}
			return a.withEnv(cmd, func(e *env) error {
				secret := "cs_" + randomToken(32)
				now := e.now().UTC()
				c, err := e.updateCredential(args[0], "rotated", func(c *store.Credential) error {
					if c.Revoked {
						return fmt.Errorf("credential %s is revoked; create a new one", c.ClientID)
					}
					c.Rotate(store.HashSecret(secret), now, g)
					return nil
				})
				if err != nil {
					return err
				}
				if jsonFlag(cmd) {
					return printJSON(cmd.OutOrStdout(), map[string]any{"client_id": c.ClientID, "client_secret": secret, "scopes": c.Scopes, "tenant": c.Tenant, "previous_secret_valid_until": c.PrevUntil})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "client_id:     %s\nclient_secret: %s\n%s The new one is shown only this once.\n",
					c.ClientID, secret, oldSecretFate(c.PrevUntil, now))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&grace, "grace", "24h", "how long the old secret keeps working, up to 90d")
	return cmd
}

// oldSecretFate says, for admin credential rotate, until when the old
// secret and the tokens obtained with it work: until, the grace's end, at
// now (--grace 0, after a leak) is "no longer", which "works until" the
// very time of the command left the operator to work out.
func oldSecretFate(until, now time.Time) string {
	if !until.After(now) {
		return "The old secret, and every token obtained with it, no longer work."
	}
	return fmt.Sprintf("The old secret, and the tokens obtained with it, work until %s.", until.Format(time.RFC3339))
}

func clockShowCmd(a *app) *cobra.Command {
	return a.tenantCmd("show --tenant ID", "Show a sandbox tenant's clock", func(cmd *cobra.Command, e *env, t *store.Tenant) error {
		if !t.Sandbox {
			return fmt.Errorf("tenant %q is not a sandbox tenant: it runs on real time", t.ID)
		}
		return printClock(cmd, t)
	})
}

func printClock(cmd *cobra.Command, t *store.Tenant) error {
	now := t.ClockNow.UTC().Format(time.RFC3339Nano)
	if jsonFlag(cmd) {
		return printJSON(cmd.OutOrStdout(), map[string]string{"tenant": t.ID, "now": now})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", t.ID, now)
	return nil
}

// advanceClock moves sandbox tenant id's clock d forward and returns once
// the learner has folded the rewards the move closed (services.clockMoved):
// "admin clock advance", which runs it inside serve when a server runs.
func (e *env) advanceClock(id string, d time.Duration) (*store.Tenant, error) {
	t, err := e.updateTenant(id, func(t *store.Tenant) error {
		if !t.Sandbox {
			return fmt.Errorf("tenant %q is not a sandbox tenant: its clock is real time", id)
		}
		next := t.ClockNow.Add(d)
		if next.After(store.LastSandboxClock()) {
			return fmt.Errorf("--by: the clock would pass %s, the latest a sandbox clock may show (coupond's times run up to two years ahead of it and its store keys hold times up to %s)",
				store.LastSandboxClock().Format(time.DateOnly), store.LastKeyTime().Format(time.DateOnly))
		}
		t.ClockNow = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.svc.clockMoved(t)
	return t, nil
}

func clockAdvanceCmd(a *app) *cobra.Command {
	var tenant, by string
	cmd := leafCmd("advance --tenant ID --by DURATION", "Move a sandbox tenant's clock forward (36h, 7d)", func(cmd *cobra.Command) error {
		d, err := parseDays(by)
		switch {
		case err != nil:
			return fmt.Errorf("--by: %v; want a positive duration such as 36h or 7d", err)
		case d <= 0:
			return fmt.Errorf("--by: want a positive duration such as 36h or 7d, got %q", by)
		}
		return a.withEnv(cmd, func(e *env) error {
			t, err := e.advanceClock(tenant, d)
			if err != nil {
				return err
			}
			return printClock(cmd, t)
		})
	})
	tenantFlag(cmd, &tenant)
	cmd.Flags().StringVar(&by, "by", "", "how far, e.g. 36h or 7d; a sandbox clock goes no further than "+store.LastSandboxClock().Format(time.DateOnly))
	cmd.MarkFlagRequired("by")
	return cmd
}

// tenantTakenError says why the id of a tenant to create is taken: a
// tenant of that id exists, or one is still being deleted (its id is free
// again once its deletion is done).
func tenantTakenError(db *store.DB, id string) error {
	if d, err := db.TenantDeletionOf(id); err == nil && d != nil && d.State != store.TenantDeleted {
		return fmt.Errorf("tenant %q is being deleted (%s): its id can be taken again once 'admin tenant deletions' shows it deleted", id, d.State)
	}
	return fmt.Errorf("tenant %q already exists", id)
}
