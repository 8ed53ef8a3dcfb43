package store

import (
	"bytes"
	"crypto/sha256"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fixed inputs of the golden key test
var (
	gt0 = time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	gt1 = time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC) // before the epoch: sign bit flipped
)

type keyCase struct {
	name    string
	got     []byte // the typed function's key
	general []byte // the same key through the general builder (nil: none)
	golden  string // %q of the persistent bytes
}

func spanLo(lo, _ []byte) []byte { return lo }
func spanHi(_, hi []byte) []byte { return hi }

func keyCases() []keyCase {
	return []keyCase{
		{"tenant", tenantKey("acme"), nil, ""},
		{"credential", credentialKey("ci-1"), nil, ""},
		{"tenant span lo", spanLo(TenantSpan("acme")), nil, ""},
		{"tenant span hi", spanHi(TenantSpan("acme")), nil, ""},
		{"event", EventKey("acme", "ev-1"), key("acme", tableEvent, "ev-1"), ""},
		{"event span", spanLo(EventSpan("acme")), key("acme", tableEvent), ""},
		{"customer event", CustomerEventKey("acme", "ana", gt0, "ev-1"), key("acme", tableCustomerEvent, "ana", gt0, "ev-1"), ""},
		{"customer event pre-epoch", CustomerEventKey("acme", "ana", gt1, ""), key("acme", tableCustomerEvent, "ana", gt1, ""), ""},
		{"customer event span", spanLo(CustomerEventSpan("acme", "ana")), key("acme", tableCustomerEvent, "ana"), ""},
		{"customer event index", spanLo(CustomerEventIndexSpan("acme")), key("acme", tableCustomerEvent), ""},
		{"features", FeaturesKey("acme", "ana"), key("acme", tableFeatures, "ana"), ""},
		{"features span", spanLo(FeaturesSpan("acme")), key("acme", tableFeatures), ""},
		{"decision", DecisionKey("acme", "n-1"), key("acme", tableDecision, "n-1"), ""},
		{"decision span", spanLo(DecisionSpan("acme")), key("acme", tableDecision), ""},
		{"decision nonce span", spanLo(DecisionNonceSpan("acme", "0A1")), key("acme", tableDecision, []byte("0A1")), ""},
		{"decision nonce span hi", spanHi(DecisionNonceSpan("acme", "0A1")), nil, ""},
		{"customer decision", CustomerDecisionKey("acme", "ana", gt0, "n-1"), key("acme", tableCustomerDecide, "ana", gt0, "n-1"), ""},
		{"customer decision span", spanLo(CustomerDecisionSpan("acme", "ana")), key("acme", tableCustomerDecide, "ana"), ""},
		{"customer decision index", spanLo(CustomerDecisionIndexSpan("acme")), key("acme", tableCustomerDecide), ""},
		{"attribution", AttributionKey("acme", "cup-1"), key("acme", tableAttribution, "cup-1"), ""},
		{"attribution span", spanLo(AttributionSpan("acme")), key("acme", tableAttribution), ""},
		{"idempotency", IdempotencyKey("acme", "idem-1"), key("acme", tableIdempotency, "idem-1"), ""},
		{"idempotency span", spanLo(IdempotencySpan("acme")), key("acme", tableIdempotency), ""},
		{"catalog", CatalogKey("acme"), key("acme", tableCatalog), ""},
		{"campaign", CampaignKey("acme", "camp"), key("acme", tableCampaign, "camp"), ""},
		{"budget", BudgetKey("acme", "camp"), key("acme", tableBudget, "camp"), ""},
		{"model", ModelKey("acme", 0), key("acme", tableModel), ""},
		{"model generation", ModelKey("acme", 5), key("acme", tableModel, uint64(5)), ""},
		{"model span hi", spanHi(ModelSpan("acme")), nil, ""},
		{"reward queue", RewardQueueKey("acme", gt0, "r", "n-1"), key("acme", tableRewardQueue, gt0, "r", "n-1"), ""},
		{"reward queue due lo", spanLo(RewardQueueDueSpan("acme", gt0)), key("acme", tableRewardQueue), ""},
		{"reward queue due hi", spanHi(RewardQueueDueSpan("acme", gt0)), key("acme", tableRewardQueue, gt0.Add(time.Nanosecond)), ""},
		{"job", JobKey("acme", "job-1"), key("acme", tableJob, "job-1"), ""},
		{"job span", spanLo(JobSpan("acme")), key("acme", tableJob), ""},
		{"job chunk", JobChunkKey("acme", "job-1", 3), key("acme", tableJobClients, "job-1", 3), ""},
		{"job chunks span", spanLo(JobChunksSpan("acme", "job-1")), key("acme", tableJobClients, "job-1"), ""},
		{"job chunk table", spanLo(JobChunkTableSpan("acme")), key("acme", tableJobClients), ""},
		{"webhook", WebhookKey("acme"), key("acme", tableWebhook), ""},
		{"webhook delivery", WebhookDeliveryKey("acme", gt0, "wh-1"), key("acme", tableWebhookQueue, gt0, "wh-1"), ""},
		{"webhook queue span", spanLo(WebhookQueueSpan("acme")), key("acme", tableWebhookQueue), ""},
		{"webhook due hi", spanHi(WebhookDueSpan("acme", gt0)), key("acme", tableWebhookQueue, gt0.Add(time.Nanosecond)), ""},
		{"quota", QuotaKey("acme", "2026-03-04", "decisiones"), key("acme", tableDaily, "2026-03-04", "quota:decisiones"), ""},
		{"daily span", spanLo(DailySpan("acme")), key("acme", tableDaily), ""},
		{"deletion", DeletionKey("acme", "h-1"), key("acme", tableDeletion, "h-1"), ""},
		{"deletion span", spanLo(DeletionSpan("acme")), key("acme", tableDeletion), ""},
		{"deletion queue", DeletionQueueKey("acme", gt0, "h-1"), key("acme", tableDeletionQueue, gt0, "h-1"), ""},
		{"deletion queue span", spanLo(DeletionQueueSpan("acme")), key("acme", tableDeletionQueue), ""},
		{"access log", AccessLogKey("acme", gt0, "tr-1"), key("acme", tableAccessLog, gt0, "tr-1"), ""},
		{"access log span", spanLo(AccessLogSpan("acme")), key("acme", tableAccessLog), ""},
		{"quality", QualityKey("acme"), key("acme", tableQuality), ""},
		{"abuse", AbuseKey("acme", "ci-1"), key("acme", tableAbuse, "ci-1"), ""},
		{"abuse span", spanLo(AbuseSpan("acme")), key("acme", tableAbuse), ""},
		{"quarantine", QuarantineKey("acme", gt0, "tr-1"), key("acme", tableQuarantine, gt0, "tr-1"), ""},
		{"quarantine span", spanLo(QuarantineSpan("acme")), key("acme", tableQuarantine), ""},
		{"held event", HeldEventKey("acme", "ev-1"), key("acme", tableHeldEvent, heldEventHash("ev-1")), ""},
		{"held event span", spanLo(HeldEventSpan("acme")), key("acme", tableHeldEvent), ""},
		{"customer state", CustomerStateKey("acme", "ana"), key("acme", tableMeta, "cust", "ana"), ""},
		{"customer state span", spanLo(CustomerStateSpan("acme")), key("acme", tableMeta, "cust"), ""},
		{"hourly", HourlyKey("acme", 493_000), key("acme", tableMeta, "hourly", int64(493_000)), ""},
		{"damaged", DamagedKey("acme", EventKey("acme", "ev-1")), nil, ""},
		{"damaged span", spanLo(DamagedSpan("acme")), key("acme", tableDamaged), ""},
		{"console link", ConsoleLinkKey("h"), nil, ""},
		{"console session", ConsoleSessionKey("h"), nil, ""},
		{"console link span", spanLo(ConsoleLinkSpan()), nil, ""},
		{"console session span", spanLo(ConsoleSessionSpan()), nil, ""},
		{"console audit", ConsoleAuditKey("acme", gt0, 7), nil, ""},
		{"console audit span", spanLo(ConsoleAuditSpan("acme")), nil, ""},
		{"console audit span all", spanLo(ConsoleAuditSpan("")), nil, ""},
		{"format mark", formatKey(), nil, ""},
		{"keys mark", keysMarkKey(), nil, ""},
		{"purge round", purgeRoundKey(), nil, ""},
		{"tenant deletion", tenantDeletionKey("acme"), nil, ""},
	}
}

// goldenKeys are the persistent bytes of each case of keyCases, taken from
// the layout before the tables were typed (the old generic builder). A
// change here is a change of the stored format: it needs a migration.
var goldenKeys = map[string]string{
	"tenant":                   "\x01Tacme\x00",
	"credential":               "\x01Cci-1\x00",
	"tenant span lo":           "\x02acme\x00",
	"tenant span hi":           "\x02acme\x01",
	"event":                    "\x02acme\x00eev-1\x00",
	"event span":               "\x02acme\x00e",
	"customer event":           "\x02acme\x00Eana\x00\x98\x99\x8b\x01\x85\x9e\xb6\bev-1\x00",
	"customer event pre-epoch": "\x02acme\x00Eana\x00\x7f\xff\xff\xff\xc4e6\x00\x00",
	"customer event span":      "\x02acme\x00Eana\x00",
	"customer event index":     "\x02acme\x00E",
	"features":                 "\x02acme\x00fana\x00",
	"features span":            "\x02acme\x00f",
	"decision":                 "\x02acme\x00dn-1\x00",
	"decision span":            "\x02acme\x00d",
	"decision nonce span":      "\x02acme\x00d0A1",
	"decision nonce span hi":   "\x02acme\x00d0A2",
	"customer decision":        "\x02acme\x00Dana\x00\x98\x99\x8b\x01\x85\x9e\xb6\bn-1\x00",
	"customer decision span":   "\x02acme\x00Dana\x00",
	"customer decision index":  "\x02acme\x00D",
	"attribution":              "\x02acme\x00acup-1\x00",
	"attribution span":         "\x02acme\x00a",
	"idempotency":              "\x02acme\x00iidem-1\x00",
	"idempotency span":         "\x02acme\x00i",
	"catalog":                  "\x02acme\x00k",
	"campaign":                 "\x02acme\x00pcamp\x00",
	"budget":                   "\x02acme\x00bcamp\x00",
	"model":                    "\x02acme\x00m",
	"model generation":         "\x02acme\x00m\x00\x00\x00\x00\x00\x00\x00\x05",
	"model span hi":            "\x02acme\x00n",
	"reward queue":             "\x02acme\x00r\x98\x99\x8b\x01\x85\x9e\xb6\br\x00n-1\x00",
	"reward queue due lo":      "\x02acme\x00r",
	"reward queue due hi":      "\x02acme\x00r\x98\x99\x8b\x01\x85\x9e\xb6\t",
	"job":                      "\x02acme\x00jjob-1\x00",
	"job span":                 "\x02acme\x00j",
	"job chunk":                "\x02acme\x00Jjob-1\x00\x80\x00\x00\x00\x00\x00\x00\x03",
	"job chunks span":          "\x02acme\x00Jjob-1\x00",
	"job chunk table":          "\x02acme\x00J",
	"webhook":                  "\x02acme\x00w",
	"webhook delivery":         "\x02acme\x00W\x98\x99\x8b\x01\x85\x9e\xb6\bwh-1\x00",
	"webhook queue span":       "\x02acme\x00W",
	"webhook due hi":           "\x02acme\x00W\x98\x99\x8b\x01\x85\x9e\xb6\t",
	"quota":                    "\x02acme\x00q2026-03-04\x00quota:decisiones\x00",
	"daily span":               "\x02acme\x00q",
	"deletion":                 "\x02acme\x00xh-1\x00",
	"deletion span":            "\x02acme\x00x",
	"deletion queue":           "\x02acme\x00X\x98\x99\x8b\x01\x85\x9e\xb6\bh-1\x00",
	"deletion queue span":      "\x02acme\x00X",
	"access log":               "\x02acme\x00l\x98\x99\x8b\x01\x85\x9e\xb6\btr-1\x00",
	"access log span":          "\x02acme\x00l",
	"quality":                  "\x02acme\x00Q",
	"abuse":                    "\x02acme\x00Aci-1\x00",
	"abuse span":               "\x02acme\x00A",
	"quarantine":               "\x02acme\x00z\x98\x99\x8b\x01\x85\x9e\xb6\btr-1\x00",
	"quarantine span":          "\x02acme\x00z",
	"held event":               "\x02acme\x00h\xe8\xbd\x59\xa7\x1e\x7e\x46\x7b\xb6\x6d\x5c\x98\x31\x4e\x26\xf7",
	"held event span":          "\x02acme\x00h",
	"customer state":           "\x02acme\x00Mcust\x00ana\x00",
	"customer state span":      "\x02acme\x00Mcust\x00",
	"hourly":                   "\x02acme\x00Mhourly\x00\x80\x00\x00\x00\x00\a\x85\xc8",
	"damaged":                  "\x02acme\x00Ueev-1\x00",
	"damaged span":             "\x02acme\x00U",
	"console link":             "\x01Olink\x00h\x00",
	"console session":          "\x01Osession\x00h\x00",
	"console link span":        "\x01Olink\x00",
	"console session span":     "\x01Osession\x00",
	"console audit":            "\x01Oaudit\x00acme\x00\x98\x99\x8b\x01\x85\x9e\xb6\b\x00\x00\x00\x00\x00\x00\x00\a",
	"console audit span":       "\x01Oaudit\x00acme\x00",
	"console audit span all":   "\x01Oaudit\x00",
	"format mark":              "\x01F",
	"keys mark":                "\x01K",
	"purge round":              "\x01W",
	"tenant deletion":          "\x01Racme\x00",
}

// TestKeyLayoutGolden pins every table's key bytes: each typed function
// against the golden bytes and against the general builder.
func TestKeyLayoutGolden(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range keyCases() {
		seen[c.name] = true
		want, ok := goldenKeys[c.name]
		if !ok {
			t.Errorf("%s: no golden bytes", c.name)
			continue
		}
		if string(c.got) != want {
			t.Errorf("%s: key %q, golden %q", c.name, c.got, want)
		}
		if c.general != nil && !bytes.Equal(c.general, c.got) {
			t.Errorf("%s: typed key %q, general builder %q", c.name, c.got, c.general)
		}
	}
	for name := range goldenKeys {
		if !seen[name] {
			t.Errorf("golden %s: no case", name)
		}
	}
}

// TestKeyDecodersRoundTrip decodes the keys the typed functions build.
func TestKeyDecodersRoundTrip(t *testing.T) {
	type parsed struct {
		A, B, C string
		At      time.Time
		N       int64
		OK      bool
	}
	tests := []struct {
		name string
		got  parsed
		want parsed
	}{
		{"customer event", func() parsed {
			r, at, id, ok := ParseCustomerEventKey("acme", CustomerEventKey("acme", "ana", gt0, "ev-1"))
			return parsed{A: r, At: at, C: id, OK: ok}
		}(), parsed{A: "ana", At: gt0, C: "ev-1", OK: true}},
		{"customer decision", func() parsed {
			r, at, n, ok := ParseCustomerDecisionKey("acme", CustomerDecisionKey("acme", "ana", gt1, "n-1"))
			return parsed{A: r, At: at, C: n, OK: ok}
		}(), parsed{A: "ana", At: gt1, C: "n-1", OK: true}},
		{"features", func() parsed {
			r, ok := FeaturesRef("acme", FeaturesKey("acme", "ana"))
			return parsed{A: string(r), OK: ok}
		}(), parsed{A: "ana", OK: true}},
		{"idempotency", func() parsed {
			k, ok := ParseIdempotencyKey("acme", IdempotencyKey("acme", "idem-1"))
			return parsed{A: k, OK: ok}
		}(), parsed{A: "idem-1", OK: true}},
		{"reward queue", func() parsed {
			at, kind, n, ok := ParseRewardQueueKey("acme", RewardQueueKey("acme", gt0, "r", "n-1"))
			return parsed{At: at, B: kind, C: n, OK: ok}
		}(), parsed{At: gt0, B: "r", C: "n-1", OK: true}},
		{"webhook delivery", func() parsed {
			at, id, ok := ParseWebhookDeliveryKey("acme", WebhookDeliveryKey("acme", gt0, "wh-1"))
			return parsed{At: at, C: id, OK: ok}
		}(), parsed{At: gt0, C: "wh-1", OK: true}},
		{"deletion queue", func() parsed {
			at, h, ok := ParseDeletionQueueKey("acme", DeletionQueueKey("acme", gt0, "h-1"))
			return parsed{At: at, C: h, OK: ok}
		}(), parsed{At: gt0, C: "h-1", OK: true}},
		{"deletion record", func() parsed {
			h, ok := ParseDeletionKey("acme", DeletionKey("acme", "h-1"))
			return parsed{C: h, OK: ok}
		}(), parsed{C: "h-1", OK: true}},
		{"model generation", func() parsed {
			g, ok := ParseModelKey("acme", ModelKey("acme", 1<<40))
			return parsed{N: int64(g), OK: ok}
		}(), parsed{N: 1 << 40, OK: true}},
		{"model of releases before generations", func() parsed {
			g, ok := ParseModelKey("acme", ModelKey("acme", 0))
			return parsed{N: int64(g), OK: ok}
		}(), parsed{OK: true}},
		{"model generation 0 as 8 bytes", func() parsed {
			_, ok := ParseModelKey("acme", key("acme", tableModel, uint64(0)))
			return parsed{OK: ok}
		}(), parsed{}},
		{"model of another tenant", func() parsed {
			_, ok := ParseModelKey("acm", ModelKey("acme", 3))
			return parsed{OK: ok}
		}(), parsed{}},
		{"hourly", func() parsed {
			h, ok := ParseHourlyKey("acme", HourlyKey("acme", -3))
			return parsed{N: h, OK: ok}
		}(), parsed{N: -3, OK: true}},
		{"hourly is not a customer state", func() parsed {
			_, ok := ParseHourlyKey("acme", CustomerStateKey("acme", "ana"))
			return parsed{OK: ok}
		}(), parsed{}},
		{"daily quota has no customer", func() parsed {
			r, ok := DailyCustomer("acme", QuotaKey("acme", "2026-03-04", "eventos"))
			return parsed{A: r, OK: ok}
		}(), parsed{}},
		{"daily customer", func() parsed {
			r, ok := DailyCustomer("acme", key("acme", tableDaily, "2026-03-04", "cap", "ana"))
			return parsed{A: r, OK: ok}
		}(), parsed{A: "ana", OK: true}},
		{"truncated", func() parsed {
			k := CustomerEventKey("acme", "ana", gt0, "ev-1")
			_, _, _, ok := ParseCustomerEventKey("acme", k[:len(k)-2])
			return parsed{OK: ok}
		}(), parsed{}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestKeyPrefixesDoNotOverlap lists every key prefix (global records, each
// registered tenant table, the meta sub-prefixes, the console kinds) and
// fails when one is a prefix of another: two tables would then share keys.
func TestKeyPrefixesDoNotOverlap(t *testing.T) {
	prefixes := map[string]string{
		"tenant records":     string(tenantRecordsPrefix()),
		"credential records": string(credentialRecordsPrefix()),
		"console link":       string(spanLo(ConsoleLinkSpan())),
		"console session":    string(spanLo(ConsoleSessionSpan())),
		"console audit":      string(spanLo(ConsoleAuditSpan(""))),
		"purge owed":         string(purgeOwedKey(nil)),
		"log damage":         string(spanLo(logDamageSpan())),
		"format mark":        string(formatKey()),
		"keys mark":          string(keysMarkKey()),
		"keys next":          string(keysNextKey()),
		"purge round":        string(purgeRoundKey()),
		"tenant deletions":   string(tenantDeletionsPrefix()),
	}
	bytesSeen := map[byte]string{}
	for _, tb := range tables {
		name := tb.name
		if name == "" {
			name = "damaged"
		}
		if other, dup := bytesSeen[tb.b]; dup {
			t.Errorf("table byte %q used by %s and %s", tb.b, other, name)
		}
		bytesSeen[tb.b] = name
		if tb.kind == KindMeta {
			prefixes["meta cust"] = string(spanLo(CustomerStateSpan("acme")))
			prefixes["meta hourly"] = string(key("acme", tableMeta, "hourly"))
			continue
		}
		prefixes[name] = string(key("acme", tb.b))
	}
	// Every table constant of keys.go is registered.
	for name, b := range tableConsts(t) {
		if _, ok := bytesSeen[b]; !ok {
			t.Errorf("table byte %q (%s) not registered in tables", b, name)
		}
	}
	for a, pa := range prefixes {
		for b, pb := range prefixes {
			if a != b && strings.HasPrefix(pa, pb) {
				t.Errorf("prefix of %s (%q) starts with the prefix of %s (%q)", a, pa, b, pb)
			}
		}
	}
	// Tenant spaces: a tenant's span never holds a key of a tenant whose id
	// it prefixes, nor a global record.
	lo, hi := TenantSpan("acme")
	for _, k := range [][]byte{EventKey("acme2", "x"), EventKey("acm", "x"), tenantKey("acme"), ConsoleAuditKey("acme", gt0, 1)} {
		if bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0 {
			t.Errorf("tenant span of acme holds %q", k)
		}
	}
}

// TestKindOf names each table's keys.
func TestKindOf(t *testing.T) {
	tests := []struct {
		key  []byte
		kind Kind
		name string
	}{
		{EventKey("acme", "e"), KindEvent, "event"},
		{CustomerStateKey("acme", "ana"), KindCustomerState, "meta"},
		{HourlyKey("acme", 1), KindHourly, "meta"},
		{key("acme", tableMeta, "other"), KindMeta, "meta"},
		{JobChunkKey("acme", "j", 0), KindJobChunk, "job_clients"},
		{DamagedKey("acme", EventKey("acme", "e")), KindDamaged, "table 'U'"},
		{key("acme", '~'), KindUnknown, "table '~'"},
		{EventKey("other", "e"), KindUnknown, "event"},
	}
	for _, tt := range tests {
		if got := KindOf("acme", tt.key); got != tt.kind {
			t.Errorf("KindOf(%q) = %d, want %d", tt.key, got, tt.kind)
		}
		if tt.kind != KindUnknown || tt.name != "event" {
			if got, _ := DescribeKey("acme", tt.key); got != tt.name {
				t.Errorf("DescribeKey(%q) = %q, want %q", tt.key, got, tt.name)
			}
		}
	}
}

// TestQuotaCount round-trips the daily quota counter's 8-byte codec.
func TestQuotaCount(t *testing.T) {
	db, _ := openMem(t)
	if n, err := db.QuotaCount("acme", "2026-03-04", "decisiones"); err != nil || n != 0 {
		t.Fatalf("missing counter: %d %v, want 0", n, err)
	}
	b := db.NewBatch()
	b.SetQuotaCount("acme", "2026-03-04", "decisiones", 41)
	b.Set(QuotaKey("acme", "2026-03-04", "eventos"), []byte("bad"))
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if n, err := db.QuotaCount("acme", "2026-03-04", "decisiones"); err != nil || n != 41 {
		t.Errorf("counter: %d %v, want 41", n, err)
	}
	if n, err := db.QuotaCount("acme", "2026-03-04", "eventos"); err != nil || n != 0 {
		t.Errorf("counter of the wrong size: %d %v, want 0", n, err)
	}
}

// TestDescribeKey renders keys for admin output, short ones included.
func TestDescribeKey(t *testing.T) {
	tests := []struct {
		key         []byte
		table, text string
	}{
		{EventKey("acme", "ev-1"), "event", `"eev-1\x00"`},
		{tenantPrefix("acme"), "?", `""`},
		{[]byte{spaceTenant, 'a'}, "?", `"\x02a"`},
		{nil, "?", `""`},
	}
	for _, tt := range tests {
		table, text := DescribeKey("acme", tt.key)
		if table != tt.table || text != tt.text {
			t.Errorf("DescribeKey(%q) = %q, %q; want %q, %q", tt.key, table, text, tt.table, tt.text)
		}
	}
}

// heldEventHash is the part of a held-event index key after its table
// byte: the first 16 bytes of the event_id's SHA-256.
func heldEventHash(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:16]
}

// tableConsts returns the table constants keys.go declares (table* byte =
// 'c'), read from its source so that a new one need not be listed by hand.
func tableConsts(t *testing.T) map[string]byte {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "keys.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]byte{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for i, n := range v.Names {
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !strings.HasPrefix(n.Name, "table") || !ok || lit.Kind != token.CHAR {
					continue
				}
				c, _, _, err := strconv.UnquoteChar(strings.Trim(lit.Value, "'"), '\'')
				if err != nil || c > 0xff {
					t.Fatalf("keys.go: %s = %s is not a byte", n.Name, lit.Value)
				}
				consts[n.Name] = byte(c)
			}
		}
	}
	if len(consts) < 20 {
		t.Fatalf("found %d table constants in keys.go: has its form changed?", len(consts))
	}
	return consts
}
