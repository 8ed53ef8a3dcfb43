package console

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/engine"
	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// systemRowRE finds the lines of the tenants page's system card: name,
// red or not, text.
var systemRowRE = regexp.MustCompile(`<tr class="(row-red)?" data-line="([^"]+)"><th scope="row" class="nowrap">[^<]*</th><td>([^<]*)</td></tr>`)

// traceIDRE finds a trace id named in a text.
var traceIDRE = regexp.MustCompile(`trace_id [0-9a-f]{16}`)

type shownLine struct {
	Name, Text string
	Red        bool
}

// TestTenantsPageShowsDiskAndBackups reads the tenants page's first card:
// the disk against its reserve, the latest backup's age and what restore
// would refuse, and the damaged records, each red when it needs the
// operator. Before it, the console showed none of them: an operator saw a
// healthy tenant list while the API refused every write, or with no
// backup taken for a week.
func TestTenantsPageShowsDiskAndBackups(t *testing.T) {
	h := newHarness(t)
	now := h.clock.Now()
	ok := store.SpaceStatus{Known: true, Avail: 50 << 30, Total: 100 << 30, Reserve: 5 << 30}
	complete := func(ago time.Duration) privacy.BackupInfo {
		return privacy.BackupInfo{Dir: "/b", TakenAt: now.Add(-ago), State: privacy.BackupComplete}
	}
	for _, tc := range []struct {
		name    string
		space   store.SpaceStatus
		backups *privacy.BackupList
		listErr error
		damaged bool // a record held in quarantine (the last case: it stays)
		want    []shownLine
	}{{
		name: "healthy", space: ok,
		backups: &privacy.BackupList{Backups: []privacy.BackupInfo{complete(30 * time.Hour), complete(3*time.Hour + 12*time.Minute)}},
		want: []shownLine{
			{"disk", "50.0 GiB free of 100.0 GiB; the API refuses writes below 5.0 GiB", false},
			{"backups", "latest complete backup taken 2026-11-02 08:48:00Z (3 h 12 min ago), 2 registered", false},
			{"damaged records", "none held in quarantine", false},
		},
	}, {
		name:    "below the reserve, no backup",
		space:   store.SpaceStatus{Known: true, Low: true, Avail: 1 << 29, Total: 100 << 30, Reserve: 5 << 30},
		backups: &privacy.BackupList{Backups: []privacy.BackupInfo{}},
		want: []shownLine{
			{"disk", "0.5 GiB free, below the reserve of 5.0 GiB: the API refuses writes (503 almacenamiento_lleno)", true},
			{"backups", "no complete backup: take one with &#39;coupond admin backup --out DIR&#39;", true},
			{"damaged records", "none held in quarantine", false},
		},
	}, {
		name:  "store failed, old and damaged backups",
		space: store.SpaceStatus{Known: true, Failed: true},
		backups: &privacy.BackupList{Backups: []privacy.BackupInfo{complete(50 * time.Hour), {Dir: "/c", TakenAt: now.Add(-time.Hour), State: privacy.BackupIncomplete}},
			RegistryErr: errors.New("backups.json: damaged")},
		want: []shownLine{
			{"disk", "writes stopped: a write failed inside the store; restart coupond (the server log says why)", true},
			{"backups", "latest complete backup taken 2026-10-31 10:00:00Z (2 days 2 h ago), 2 registered; 1 that restore refuses: see &#39;coupond admin backups&#39;; the backup registry cannot be used: run &#39;coupond admin check&#39;", true},
			{"damaged records", "none held in quarantine", false},
		},
	}, {
		name:    "store failed for want of file descriptors, restarts itself",
		space:   store.SpaceStatus{Known: true, Failed: true, NoFiles: true, Resumes: true, Avail: 50 << 30},
		backups: &privacy.BackupList{Backups: []privacy.BackupInfo{complete(time.Minute)}},
		want: []shownLine{
			{"disk", "writes stopped: coupond ran out of file descriptors; serve restarts itself once it can open files again (raise LimitNOFILE)", true},
			{"backups", "latest complete backup taken 2026-11-02 11:59:00Z (1 min ago), 1 registered", false},
			{"damaged records", "none held in quarantine", false},
		},
	}, {
		name: "backups unreadable", space: ok, listErr: errors.New("boom"),
		want: []shownLine{
			{"disk", "50.0 GiB free of 100.0 GiB; the API refuses writes below 5.0 GiB", false},
			{"backups", "cannot list the backups: the server log says why (trace_id TRACE); see &#39;coupond admin backups&#39;", true},
			{"damaged records", "none held in quarantine", false},
		},
	}, {
		name: "a damaged record", space: ok, damaged: true,
		backups: &privacy.BackupList{Backups: []privacy.BackupInfo{complete(time.Minute)}},
		want: []shownLine{
			{"disk", "50.0 GiB free of 100.0 GiB; the API refuses writes below 5.0 GiB", false},
			{"backups", "latest complete backup taken 2026-11-02 11:59:00Z (1 min ago), 1 registered", false},
			{"damaged records", "1 held in quarantine or left unread: &#39;coupond admin check&#39; lists them", true},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.damaged {
				b := h.db.NewBatch()
				b.Set(store.DamagedKey("acme", store.DeletionKey("acme", "00ff")), []byte("not json"))
				if err := b.Commit(); err != nil {
					t.Fatal(err)
				}
				b.Close()
			}
			d := h.console.d
			d.Space = func() store.SpaceStatus { return tc.space }
			d.Backups = func(context.Context) (*privacy.BackupList, error) { return tc.backups, tc.listErr }
			con := New(d)
			defer con.Close()
			srv := httptest.NewServer(con)
			defer srv.Close()
			c := h.client()
			h.signIn(c, h.link()) // the cookie is the host's, whatever the port: it reaches srv too
			st, body := get(t, c, srv.URL+"/")
			if st != 200 {
				t.Fatalf("tenants page: %d\n%s", st, body)
			}
			var got []shownLine
			for _, m := range systemRowRE.FindAllStringSubmatch(body, -1) {
				got = append(got, shownLine{Name: m[2], Text: traceIDRE.ReplaceAllString(m[3], "trace_id TRACE"), Red: m[1] != ""})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("system card (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTenantsNeedingTheOperatorFirst: the tenants page lists the red rows
// (confirmations at or under 95 %), then the yellow ones (open warnings),
// then the rest, by ID within each, and says how many need attention.
// It listed them by ID only: among hundreds of tenants a red row could sit
// far below the fold.
func TestTenantsNeedingTheOperatorFirst(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"beta", "delta", "gamma", "zeta"} {
		if err := h.db.CreateTenant(&store.Tenant{ID: id, CreatedAt: h.clock.Now(), Settings: store.DefaultSettings()}); err != nil {
			t.Fatal(err)
		}
	}
	cnt := h.eng.Counters()
	for id, confirmed := range map[string]int64{"zeta": 50, "delta": 99, "beta": 100} { // of 100 decisions
		cnt.Add(id, h.clock.Now(), engine.CountDecisions, 100)
		cnt.Add(id, h.clock.Now(), engine.CountConfirmed, confirmed)
	}
	h.console.d.Warnings = func(t *store.Tenant) ([]string, error) {
		if t.ID == "gamma" || t.ID == "zeta" {
			return []string{"a warning"}, nil
		}
		return nil, nil
	}
	c := h.client()
	h.signIn(c, h.link())
	_, page := get(t, c, h.con.URL+"/")
	var got []string
	for _, m := range regexp.MustCompile(`data-tenant="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		got = append(got, m[1])
	}
	if diff := cmp.Diff([]string{"zeta", "gamma", "acme", "beta", "delta"}, got); diff != "" {
		t.Errorf("tenants' order (-want +got):\n%s", diff)
	}
	if !strings.Contains(page, `<span id="attention" class="bad">2 of 5 tenants in red or yellow, listed first</span>`) {
		t.Errorf("the page does not say how many tenants need attention")
	}
}

// TestSignOutFromTheTenantPage: a tenant page has the sign-out button the
// tenants page has, and it ends the session. Only the tenants page had
// one: an operator on a tenant page had to go back to sign out.
func TestSignOutFromTheTenantPage(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.signIn(c, h.link())
	_, page := get(t, c, h.con.URL+"/t/acme")
	form := regexp.MustCompile(`<form method="post" action="/logout"><input type="hidden" name="csrf" value="([^"]+)">`).FindStringSubmatch(page)
	if form == nil {
		t.Fatal("the tenant page has no sign-out form")
	}
	if st, _ := post(t, c, h.con.URL+"/logout", url.Values{"csrf": {form[1]}}); st != http.StatusOK {
		t.Fatalf("sign out: %d", st)
	}
	if st, _ := get(t, c, h.con.URL+"/t/acme"); st != http.StatusUnauthorized {
		t.Errorf("tenant page after signing out: %d, want 401", st)
	}
}

// TestPlotHoursNameTheirZone: the plots' hours (axis ends and their
// "numbers") say they are UTC, as every other time of the console does
// (2026-11-02 12:00:00Z). They read "11-02 12:00", which an operator in
// Mexico City reads as local time, six hours off.
func TestPlotHoursNameTheirZone(t *testing.T) {
	h := newHarness(t)
	h.eng.Counters().Add("acme", h.clock.Now(), engine.CountDecisions, 7)
	c := h.client()
	h.signIn(c, h.link())
	_, page := get(t, c, h.con.URL+"/t/acme")
	for _, want := range []string{`<tr><td>11-02 12:00Z</td>`, `>10-31 13:00Z</text>`, `>11-02 12:00Z</text>`} {
		if !strings.Contains(page, want) {
			t.Errorf("tenant page lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`\d\d-\d\d \d\d:00[^Z:]`).FindString(page); m != "" {
		t.Errorf("tenant page shows an hour without its zone: %q", m)
	}
}

// TestSlowBackupListingHoldsNoPage: a backup directory on a stalled disk
// keeps the backups' listing from ending. The tenants page answers after
// the listing's wait, saying so, and starts no second listing while the
// first runs; once it ends, the page shows it. The page waited for it
// however long it took.
func TestSlowBackupListingHoldsNoPage(t *testing.T) {
	h := newHarness(t)
	d := h.console.d
	release, calls := make(chan struct{}), make(chan struct{}, 10)
	d.Backups = func(context.Context) (*privacy.BackupList, error) {
		calls <- struct{}{}
		<-release
		return &privacy.BackupList{Backups: []privacy.BackupInfo{}}, nil
	}
	con := New(d)
	defer con.Close()
	con.backups.wait = 200 * time.Millisecond
	srv := httptest.NewServer(con)
	defer srv.Close()
	var once sync.Once
	end := func() { once.Do(func() { close(release) }) }
	defer end() // before srv.Close, which waits for a page held by the listing
	c := h.client()
	h.signIn(c, h.link())
	c.Timeout = 5 * time.Second
	backupsLine := func() string {
		start := time.Now()
		st, body := get(t, c, srv.URL+"/")
		if took := time.Since(start); st != 200 || took > 5*time.Second {
			t.Fatalf("tenants page: %d after %s", st, took)
		}
		for _, m := range systemRowRE.FindAllStringSubmatch(body, -1) {
			if m[2] == "backups" {
				return m[3]
			}
		}
		return ""
	}
	for range 2 {
		if got, want := backupsLine(), "still being listed after 200ms: a backup directory&#39;s disk answers slowly (an unmounted or stalled mount?); see &#39;coupond admin backups&#39;"; got != want {
			t.Errorf("backups line while the listing hangs: %q, want %q", got, want)
		}
	}
	if n := len(calls); n != 1 {
		t.Errorf("%d listings started, want 1 while the first runs", n)
	}
	end()
	if got, want := backupsLine(), "no complete backup: take one with &#39;coupond admin backup --out DIR&#39;"; got != want {
		t.Errorf("backups line once the listing ended: %q, want %q", got, want)
	}
}
