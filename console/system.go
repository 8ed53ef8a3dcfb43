package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coupond/coupond/privacy"
	"github.com/coupond/coupond/store"
)

// BackupMaxAge is the age past which the tenants page shows the latest
// complete backup in red: four missed runs of deploy/coupond-backup.timer,
// which takes one every 6 hours.
const BackupMaxAge = 24 * time.Hour

// systemLine is one line of the tenants page's system card: what it
// concerns, what it says, and whether it needs the operator (red).
type systemLine struct {
	Name, Text string
	Alert      bool
}

// systemView is the tenants page's first card, what concerns every tenant
// at once: the data dir's free space against its reserve (the API refuses
// writes below it), the latest backup ("admin backups") and the damaged
// records held in quarantine ("admin check"). A part that cannot be read
// says so, naming the answer's trace id (its log line has the cause).
func (c *Console) systemView(ctx context.Context, trace string) []systemLine {
	lines := []systemLine{diskLine(c.space())}
	if c.d.Backups != nil {
		l, err := c.backups.list(ctx, c.d.Backups)
		if errors.Is(err, errBackupsSlow) {
			lines = append(lines, systemLine{Name: "backups", Alert: true,
				Text: fmt.Sprintf("still being listed after %s: a backup directory's disk answers slowly (an unmounted or stalled mount?); see 'coupond admin backups'", c.backups.wait)})
		} else if err != nil {
			c.d.Log.Error().Err(err).Str("trace_id", trace).Msg("console: backups")
			lines = append(lines, systemLine{Name: "backups", Alert: true,
				Text: "cannot list the backups: the server log says why (trace_id " + trace + "); see 'coupond admin backups'"})
		} else {
			lines = append(lines, backupLine(l, c.d.Now()))
		}
	}
	n, err := c.d.Engine.Quarantine.QuarantinedRecords()
	if err != nil {
		c.d.Log.Error().Err(err).Str("trace_id", trace).Msg("console: quarantine")
		return append(lines, systemLine{Name: "damaged records", Alert: true,
			Text: "cannot count them: the server log says why (trace_id " + trace + "); run 'coupond admin check'"})
	}
	n += len(c.d.DB.Unreadable())
	line := systemLine{Name: "damaged records", Text: "none held in quarantine"}
	if n > 0 {
		line = systemLine{Name: "damaged records", Alert: true,
			Text: fmt.Sprintf("%d held in quarantine or left unread: 'coupond admin check' lists them", n)}
	}
	return append(lines, line)
}

// backupWait is how long the tenants page waits for the backups' listing.
const backupWait = 2 * time.Second

// errBackupsSlow is backupLister.list's answer when the listing did not end
// within its wait.
var errBackupsSlow = errors.New("console: the backups' listing is slow")

// backupLister runs Deps.Backups for the tenants page, one listing at a
// time, and waits for it at most wait: listing stats every backup's files,
// and one on a stalled disk (a hung network mount) must hold neither the
// landing page nor a goroutine per page view. A listing that outlives its
// wait goes on; the next view waits for it again, then lists anew.
type backupLister struct {
	wait time.Duration
	mu   sync.Mutex
	done chan struct{} // closed when the running listing ends; nil when none runs
	last *privacy.BackupList
	err  error
}

// list returns a listing that ends within the wait (a running one's, or a
// new one's), errBackupsSlow when none did, or ctx's error.
func (b *backupLister) list(ctx context.Context, backups func(context.Context) (*privacy.BackupList, error)) (*privacy.BackupList, error) {
	b.mu.Lock()
	done := b.done
	if done == nil {
		done = make(chan struct{})
		b.done = done
		go func() {
			l, err := backups(context.Background()) // not the page's: it may outlive the page
			b.mu.Lock()
			b.last, b.err, b.done = l, err, nil
			b.mu.Unlock()
			close(done)
		}()
	}
	b.mu.Unlock()
	t := time.NewTimer(b.wait)
	defer t.Stop()
	select {
	case <-done:
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.last, b.err
	case <-t.C:
		return nil, errBackupsSlow
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// space is the store's free-space state (Deps.Space when set).
func (c *Console) space() store.SpaceStatus {
	if c.d.Space != nil {
		return c.d.Space()
	}
	return c.d.DB.Space()
}

// diskLine says how much room the data dir's file system has left and
// whether the API still takes writes.
func diskLine(s store.SpaceStatus) systemLine {
	l := systemLine{Name: "disk"}
	switch {
	case s.RestartNeeded():
		l.Text, l.Alert = "writes stopped: a write failed inside the store; restart coupond (the server log says why)", true
	case s.Failed && s.NoFiles:
		l.Text, l.Alert = "writes stopped: coupond ran out of file descriptors; serve restarts itself once it can open files again (raise LimitNOFILE)", true
	case s.Failed:
		l.Text, l.Alert = fmt.Sprintf("writes stopped: the disk ran out of space; serve restarts itself once it is back (%s free)", gib(s.Avail)), true
	case !s.Known:
		l.Text = "free space unknown: the file system does not report it"
	case s.Low:
		l.Text, l.Alert = fmt.Sprintf("%s free, below the reserve of %s: the API refuses writes (503 almacenamiento_lleno)", gib(s.Avail), gib(s.Reserve)), true
	case s.Reserve == 0:
		l.Text = fmt.Sprintf("%s free of %s; no reserve (--disk-reserve 0)", gib(s.Avail), gib(s.Total))
	default:
		l.Text = fmt.Sprintf("%s free of %s; the API refuses writes below %s", gib(s.Avail), gib(s.Total), gib(s.Reserve))
	}
	return l
}

// backupLine says when the latest complete backup was taken and what
// "admin backups" would exit 1 for: a registry it cannot use, a backup
// restore refuses. No complete backup, or one older than BackupMaxAge,
// is an alert too.
func backupLine(l *privacy.BackupList, now time.Time) systemLine {
	var latest *privacy.BackupInfo
	refused := 0
	for i, b := range l.Backups {
		switch {
		case b.State == privacy.BackupComplete:
			latest = &l.Backups[i] // Backups are sorted by TakenAt
		case b.NeedsOperator():
			refused++
		}
	}
	line := systemLine{Name: "backups", Text: "no complete backup: take one with 'coupond admin backup --out DIR'", Alert: true}
	if latest != nil {
		age := now.Sub(latest.TakenAt)
		line = systemLine{Name: "backups", Alert: age > BackupMaxAge,
			Text: fmt.Sprintf("latest complete backup taken %s (%s ago), %d registered", latest.TakenAt.UTC().Format("2006-01-02 15:04:05Z"), ageText(age), len(l.Backups))}
	}
	if refused > 0 {
		line.Text += fmt.Sprintf("; %d that restore refuses: see 'coupond admin backups'", refused)
		line.Alert = true
	}
	if l.RegistryErr != nil {
		line.Text += "; the backup registry cannot be used: run 'coupond admin check'"
		line.Alert = true
	}
	return line
}

// ageText prints a duration in minutes, hours and minutes, or days and
// hours.
func ageText(d time.Duration) string {
	m := int64(max(d, 0) / time.Minute)
	switch {
	case m < 60:
		return fmt.Sprintf("%d min", m)
	case m < 48*60:
		return fmt.Sprintf("%d h %d min", m/60, m%60)
	}
	return fmt.Sprintf("%d days %d h", m/(24*60), m/60%24)
}

// gib prints a byte count in GiB with one decimal.
func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
