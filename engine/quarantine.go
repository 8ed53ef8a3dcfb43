package engine

// Quarantine of damaged records (contract §8). A stored record that does not
// decode, whatever the cause (an older release's bug, a damaged disk), is
// moved aside to the tenant's damaged-record table under store.DamagedKey of its own
// key, with the decoding error and the time, and the reader that met it
// goes on without it: the learner, exports, deletions, evaluations and
// batch jobs skip it, count it and log it, never stop or loop on it.
// Deletion still reaches it: a customer's deletion deletes the quarantined
// copies of the keys it deletes, and any quarantined record whose bytes
// name the customer. `coupond admin check` walks the store with the same
// decoders (checkStored) and, with --repair, moves what fails.
//
// Stored form of a quarantine entry: the format byte damagedFormat, the
// time as varint Unix nanoseconds, the error as a uvarint length and its
// bytes, then the original value as it was.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coupond/coupond/policy"
	"github.com/coupond/coupond/store"
)

// ErrDamaged reports a stored record that does not decode. Errors that wrap
// it also wrap ErrNotFound: the record was moved to quarantine, and callers
// that skip a missing record skip a damaged one the same way.
var ErrDamaged = errors.New("engine: damaged record")

const damagedFormat byte = 1

// damagedErr is the error a loader returns for a damaged record.
func damagedErr(what string, cause error) error {
	return fmt.Errorf("%s: %w (%v; quarantined, %w)", what, ErrDamaged, cause, ErrNotFound)
}

// quarantine moves the damaged record at key (value v, which failed to
// decode with cause) to the tenant's quarantine in one synced batch, logs
// it and counts it; a key that no longer holds v (written again or
// deleted since it was read) is left as it is. The reader that met it
// goes on whatever happens here: an error (a full disk) is logged and
// returned for callers that report it.
func (e *core) quarantine(tenant string, key, v []byte, cause error) error {
	return e.quarantineAs(tenant, key, v, cause, nil)
}

// quarantineAs is quarantine that, when repaired is not nil, writes it in
// the record's place in the same batch instead of deleting the record.
func (e *core) quarantineAs(tenant string, key, v []byte, cause error, repaired []byte) error {
	_, err := e.moveDamaged(tenant, key, v, cause, repaired)
	return err
}

// moveDamaged is quarantineAs that also reports whether it moved the
// record. A key that no longer holds v was rewritten or deleted since the
// reader read it (readers such as the learner's, the evaluation's and
// admin check's scan hold no writer's lock): the writer's value stands,
// and deleting it would lose that write.
func (e *core) moveDamaged(tenant string, key, v []byte, cause error, repaired []byte) (moved bool, err error) {
	if cur, err := e.db.Get(key); errors.Is(err, store.ErrNotFound) || err == nil && !bytes.Equal(cur, v) {
		return false, nil
	}
	e.damagedSeen.Add(1)
	ev := e.log.Warn().Str("tenant", tenant).Str("table", tableName(key, tenant)).Str("error", cause.Error())
	qk := store.DamagedKey(tenant, key)
	if qk == nil {
		ev.Msg("damaged record outside the tenant's key space")
		return false, nil
	}
	b := e.db.NewBatch()
	defer b.Close()
	b.Set(qk, encodeDamaged(e.now(), cause.Error(), v))
	if repaired != nil {
		b.Set(key, repaired)
	} else {
		b.Delete(key)
	}
	if err := e.removing(tenant, key, b.Commit); err != nil {
		ev.AnErr("quarantine_error", err).Msg("damaged record skipped; moving it to quarantine failed")
		return false, err
	}
	ev.Msg("damaged record moved to quarantine")
	return true, nil
}

// removing runs commit, which deletes key of tenant: through the tenant's
// ingestion turn when key is a feature record, so that the features it
// keeps in memory never outlive the record (ingestTurn.featuresRemoved).
func (e *core) removing(tenant string, key []byte, commit func() error) error {
	if store.KindOf(tenant, key) != store.KindFeatures {
		return commit()
	}
	ts, err := e.state(tenant)
	if err != nil {
		return commit() // no state: nothing of the tenant's is kept in memory
	}
	return ts.ingestMu.featuresRemoved(commit)
}

func encodeDamaged(at time.Time, cause string, v []byte) []byte {
	b := make([]byte, 0, 1+10+len(cause)+10+len(v))
	b = append(b, damagedFormat)
	b = binary.AppendVarint(b, at.UnixNano())
	b = binAppendString(b, cause)
	return append(b, v...)
}

// DamagedRecord is one quarantined (or, from Check, failing) record.
type DamagedRecord struct {
	Tenant string    `json:"tenant"`
	Table  string    `json:"table"`
	Key    string    `json:"key"` // the record's key after the tenant prefix, quoted
	Error  string    `json:"error"`
	At     time.Time `json:"at,omitzero"` // when it was quarantined
	Bytes  int       `json:"bytes"`
	// Quarantined is true once the record sits in quarantine.
	Quarantined bool `json:"quarantined"`
}

func decodeDamaged(tenant string, qkey, v []byte) DamagedRecord {
	orig := store.DamagedOriginal(tenant, qkey)
	d := DamagedRecord{Tenant: tenant, Table: tableName(orig, tenant), Key: keyText(orig, tenant), Quarantined: true}
	r := binReader{b: v}
	if r.byte() != damagedFormat {
		d.Error, d.Bytes = "quarantine entry of an unknown format", len(v)
		return d
	}
	d.At = time.Unix(0, r.varint()).UTC()
	d.Error = r.str()
	d.Bytes = r.left()
	return d
}

// Quarantined lists the tenant's quarantined records, oldest key first.
func (e *Quarantine) Quarantined(tenant string) ([]DamagedRecord, error) {
	out := []DamagedRecord{}
	lo, hi := store.DamagedSpan(tenant)
	err := e.db.Scan(lo, hi, func(k, v []byte) error {
		out = append(out, decodeDamaged(tenant, k, v))
		return nil
	})
	return out, err
}

// QuarantinedRecords counts the records held in quarantine over all tenants
// (the gauge coupond_quarantined_records): one bounded scan per tenant.
func (e *Quarantine) QuarantinedRecords() (int, error) {
	return e.db.CountEveryTenant(store.DamagedSpan)
}

// DamagedSeen counts the damaged records readers met since the engine
// started (each is moved to quarantine on first sight, so a record counts
// again only when moving it failed).
func (e *Quarantine) DamagedSeen() int64 { return e.damagedSeen.Load() }

// CheckStats is what Check found.
type CheckStats struct {
	Tenants     int             `json:"tenants"`
	Records     int             `json:"records"`
	Damaged     []DamagedRecord `json:"damaged"`     // records that fail to decode now
	Quarantined []DamagedRecord `json:"quarantined"` // already in quarantine (before any repair)
	Repaired    int             `json:"repaired"`    // damaged records moved to quarantine by this run
}

// Check decodes every record of tenant (every tenant when tenant is "")
// with the decoders the readers use and reports the ones that fail; with
// repair it moves them to quarantine (a feature record is replaced by the
// features rebuilt from the customer's events, repairFeatures), each only
// if it still holds what the snapshot held (moveDamaged). Records are read
// from a consistent snapshot. It stops with ctx's error once ctx ends (the
// admin client went away, serve stops), within checkEvery records.
func (e *Quarantine) Check(ctx context.Context, tenant string, repair bool) (*CheckStats, error) {
	return e.CheckWithProgress(ctx, tenant, repair, nil)
}

// CheckProgress is told, every checkEvery records a check reads, the
// tenant it is reading and the records it has read so far (every tenant's).
type CheckProgress func(tenant string, records int)

// CheckWithProgress is Check telling progress (nil: nothing) how far it
// has read, so that a check of a large store, which reads every record,
// shows it is moving.
func (e *Quarantine) CheckWithProgress(ctx context.Context, tenant string, repair bool, progress CheckProgress) (*CheckStats, error) {
	st := &CheckStats{Damaged: []DamagedRecord{}, Quarantined: []DamagedRecord{}}
	var tenants []string
	if tenant != "" {
		if _, ok := e.db.Tenant(tenant); !ok {
			return nil, fmt.Errorf("%w: %q", ErrNoTenant, tenant)
		}
		tenants = []string{tenant}
	} else {
		for _, t := range e.db.Tenants() {
			tenants = append(tenants, t.ID)
		}
	}
	snap := e.db.NewSnapshot()
	defer snap.Close()
	type bad struct{ key, val []byte }
	for _, id := range tenants {
		st.Tenants++
		var found []bad
		var causes []error
		lo, hi := store.TenantSpan(id)
		err := snap.Scan(lo, hi, func(k, v []byte) error {
			if len(k) <= len(lo) {
				return nil
			}
			if store.KindOf(id, k) == store.KindDamaged {
				st.Quarantined = append(st.Quarantined, decodeDamaged(id, k, v))
				return nil
			}
			st.Records++
			if st.Records%checkEvery == 0 {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if progress != nil {
					progress(id, st.Records)
				}
			}
			if err := checkStored(id, k, v); err != nil {
				st.Damaged = append(st.Damaged, DamagedRecord{Tenant: id, Table: tableName(k, id), Key: keyText(k, id), Error: err.Error(), Bytes: len(v)})
				found = append(found, bad{bytes.Clone(k), bytes.Clone(v)})
				causes = append(causes, err)
			}
			return nil
		})
		if err != nil {
			return st, err
		}
		if !repair {
			continue
		}
		if e.afterScan != nil {
			e.afterScan()
		}
		for i, f := range found {
			moved, err := true, error(nil)
			if store.KindOf(id, f.key) == store.KindFeatures {
				err = e.repairFeatures(id, f.key, f.val, causes[i])
			} else {
				moved, err = e.moveDamaged(id, f.key, f.val, causes[i], nil) // not if rewritten since the scan
			}
			if err != nil {
				return st, fmt.Errorf("repair: %w", err)
			}
			if moved {
				st.Repaired++
			}
		}
	}
	return st, nil
}

// checkEvery is how many records Check reads between looks at its ctx.
const checkEvery = 4096

// checkStored decodes the value v stored at key of tenant with the decoder
// its table's readers use; nil when it decodes (checkKind).
func checkStored(tenant string, key, v []byte) error {
	return checkKind(store.KindOf(tenant, key), v)
}

// uncheckedKinds are the kinds checkKind passes whatever their value,
// because their readers need none or take a damaged one as empty.
var uncheckedKinds = map[store.Kind]string{
	store.KindCustomerDecision: "an index entry: the key is the record",
	store.KindRewardQueue:      "a queue entry: the key is the record",
	store.KindDaily:            "a quota counter: one not of 8 bytes reads as 0",
	store.KindHourly:           "the console's hourly counters: one that does not decode counts nothing",
	store.KindMeta:             "no other meta record is written: one found is no reader's",
	store.KindDamaged:          "a quarantined copy, kept as found",
}

// checkKind decodes v, a value of a record of kind, with the decoder its
// table's readers use; nil when it decodes, and for uncheckedKinds.
func checkKind(kind store.Kind, v []byte) error {
	switch kind {
	case store.KindEvent:
		if len(v) < 32 {
			return errors.New("event record: too short")
		}
		if _, ok := DecodeEvent(v[32:]); !ok {
			return errors.New("event record: does not decode")
		}
	case store.KindCustomerEvent:
		if _, ok := decodeEventSummary(v); !ok {
			return errors.New("customer event summary: does not decode")
		}
	case store.KindFeatures:
		if _, ok := DecodeFeatures(v); !ok {
			return errors.New("features: do not decode")
		}
	case store.KindDecision:
		var r DecisionRecord
		return unmarshalRecord(v, &r)
	case store.KindModel:
		_, _, err := unmarshalModel(v, policy.DefaultConfig())
		return err
	case store.KindCustomerState:
		var cs customerState
		return unmarshalCustomerState(v, &cs)
	case store.KindIdempotency:
		_, _, err := decodeIdem(v)
		return err
	case store.KindCampaign:
		return decodesAs[Campaign](v)
	case store.KindBudget:
		return decodesAs[budget](v)
	case store.KindAttribution:
		return decodesAs[attribution](v)
	case store.KindQuality:
		return decodesAs[Quality](v)
	case store.KindQuarantine:
		return decodesAs[store.HeldBatch](v)
	case store.KindHeldEvent:
		if len(v) <= 32 {
			return errors.New("held event index entry: too short")
		}
	case store.KindCatalog:
		return decodesAs[Catalog](v)
	case store.KindJob, store.KindJobChunk, store.KindWebhook, store.KindWebhookQueue, store.KindDeletion,
		store.KindDeletionQueue, store.KindAccessLog, store.KindAbuse:
		if !json.Valid(v) {
			return errors.New("JSON record: not valid JSON")
		}
	}
	return nil
}

// decodesAs is the error of decoding the JSON record v as a T, as its
// reader does.
func decodesAs[T any](v []byte) error {
	var x T
	return json.Unmarshal(v, &x)
}

func tableName(key []byte, tenant string) string {
	table, _ := store.DescribeKey(tenant, key)
	return table
}

// keyText renders key after the tenant prefix for admin output.
func keyText(key []byte, tenant string) string {
	_, text := store.DescribeKey(tenant, key)
	return text
}

// customerDamaged returns the keys of tenant's quarantine entries of the
// customer ref: those whose original key is one of keys (the customer's
// records found through its indexes), and those whose original key or
// value names ref as a whole (namesRef). Export counts them (en_cuarentena)
// and deletion erases them. A ref met only inside a longer identifier
// ("ana-0001" in "mariana-0001") does not count: that record is another
// customer's, and taking it told ana of mariana's data and erased it.
// Deletion stays conservative within that rule: a damaged record cannot
// be decoded to check whose it is, so any whole mention of the ref takes
// it, wherever the ref stands in the key or the value. Quarantine is
// small, so this is a scan of it.
func (e *Quarantine) customerDamaged(tenant, ref string, keys [][]byte) ([][]byte, error) {
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[string(k)] = true
	}
	prefix, _ := store.TenantSpan(tenant)
	var out [][]byte
	lo, hi := store.DamagedSpan(tenant)
	err := e.db.Scan(lo, hi, func(k, v []byte) error {
		orig := store.DamagedOriginal(tenant, k)
		if want[string(orig)] || namesRef(keyComponents(prefix, orig), ref) || namesRef(v, ref) {
			out = append(out, bytes.Clone(k))
		}
		return nil
	})
	return out, err
}

// keyComponents is what follows the tenant prefix and the table byte of
// key (a letter, which would join a first component to it): the
// 0x00-terminated strings and 8-byte integers of the key.
func keyComponents(prefix, key []byte) []byte {
	if bytes.HasPrefix(key, prefix) && len(key) > len(prefix) {
		return key[len(prefix)+1:]
	}
	return key
}

// damagedRefs calls fn with every identifier of a cliente_ref's length
// that tenant's quarantined records name as a whole (identifiers), in the
// original key or the value; fn may see one more than once. A deletion
// known only by keyed hash hashes them to find its customer when a damaged
// record is all that is left of them. Quarantine is small: a scan of it.
func (e *Quarantine) damagedRefs(tenant string, fn func(ref string)) error {
	prefix, _ := store.TenantSpan(tenant)
	lo, hi := store.DamagedSpan(tenant)
	return e.db.Scan(lo, hi, func(k, v []byte) error {
		identifiers(keyComponents(prefix, store.DamagedOriginal(tenant, k)), fn)
		identifiers(v, fn)
		return nil
	})
}

// A cliente_ref is 8 to 128 bytes long (API spec).
const minRefLen, maxRefLen = 8, 128

// identifiers calls fn with each string s of b, 8 to 128 ID bytes long,
// for which namesRef(b, s) holds: every maximal run of ID bytes, and every
// run right after its own uvarint length (the binary codecs' strings).
func identifiers(b []byte, fn func(string)) {
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && idByte(b[j]) {
			j++
		}
		if n := j - i; n >= minRefLen && n <= maxRefLen {
			fn(string(b[i:j]))
		}
		i = max(j, i+1)
	}
	for i := range b {
		n, w := binary.Uvarint(b[i:])
		if w <= 0 || n < minRefLen || n > maxRefLen || i+w+int(n) > len(b) {
			continue
		}
		if s := b[i+w : i+w+int(n)]; allID(s) {
			fn(string(s))
		}
	}
}

// allID reports whether every byte of s is an ID byte.
func allID(s []byte) bool {
	for _, c := range s {
		if !idByte(c) {
			return false
		}
	}
	return true
}

// namesRef reports whether b holds ref as a whole identifier: an
// occurrence bounded on each side by the edge of b or a byte outside the
// ID pattern's alphabet (A-Z a-z 0-9 _ . : -), as in JSON ("ref"), in key
// components (0x00-terminated) and in text; or one right after its own
// uvarint length, as the binary record codecs write strings
// (binAppendString), where the bytes around may be anything.
func namesRef(b []byte, ref string) bool {
	if ref == "" {
		return false
	}
	lenPrefix := binary.AppendUvarint(nil, uint64(len(ref)))
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(ref))
		if i < 0 {
			return false
		}
		i += off
		end := i + len(ref)
		left := i == 0 || !idByte(b[i-1])
		right := end == len(b) || !idByte(b[end])
		if (left && right) || bytes.HasSuffix(b[:i], lenPrefix) {
			return true
		}
		off = i + 1
	}
}

// idByte reports whether c may appear in an identifier (the ID pattern of
// the API: A-Z a-z 0-9 _ . : -).
func idByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '.' || c == ':' || c == '-'
}

// Quarantine lists, counts and checks damaged records: what readers moved
// aside (Quarantined), and a whole-store decode with repair (Check).
type Quarantine struct {
	*core
	// afterScan, when set (tests), runs after Check has scanned a tenant,
	// before it repairs what it found.
	afterScan func()
}
