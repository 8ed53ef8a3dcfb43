package store

import "strconv"

// Kind names the table a tenant data key belongs to, for code outside store
// that handles records of any table (the engine's check and quarantine of
// damaged records). A Kind cannot build a key.
type Kind uint8

// The kinds of tenant data records.
const (
	KindUnknown Kind = iota
	KindEvent
	KindCustomerEvent
	KindFeatures
	KindDecision
	KindCustomerDecision
	KindAttribution
	KindIdempotency
	KindCatalog
	KindCampaign
	KindBudget
	KindModel
	KindRewardQueue
	KindJob
	KindJobChunk
	KindWebhook
	KindWebhookQueue
	KindDaily
	KindDeletion
	KindDeletionQueue
	KindAccessLog
	KindQuality
	KindAbuse
	KindQuarantine
	KindMeta // a meta record that is neither of the two below
	KindCustomerState
	KindHourly
	KindDamaged
	KindHeldEvent
	kindEnd // after the last kind: a new kind goes before it
)

// Kinds lists every kind of tenant data record, KindUnknown aside, for
// code that must handle each (the engine's check of stored records, whose
// test fails on a kind it neither checks nor names as lenient).
func Kinds() []Kind {
	out := make([]Kind, 0, kindEnd-1)
	for k := KindUnknown + 1; k < kindEnd; k++ {
		out = append(out, k)
	}
	return out
}

// table is one registered tenant table: its byte, its kind and the name
// admin output and logs use ("" for the damaged-record table, which is
// named after the table of the original key).
type table struct {
	b    byte
	kind Kind
	name string
}

// tables lists every tenant table; keys_test.go checks that their bytes
// are distinct and that no prefix overlaps another.
var tables = []table{
	{tableEvent, KindEvent, "event"},
	{tableCustomerEvent, KindCustomerEvent, "customer_event"},
	{tableFeatures, KindFeatures, "features"},
	{tableDecision, KindDecision, "decision"},
	{tableCustomerDecide, KindCustomerDecision, "customer_decision"},
	{tableAttribution, KindAttribution, "attribution"},
	{tableIdempotency, KindIdempotency, "idempotency"},
	{tableCatalog, KindCatalog, "catalog"},
	{tableCampaign, KindCampaign, "campaign"},
	{tableBudget, KindBudget, "budget"},
	{tableModel, KindModel, "model"},
	{tableRewardQueue, KindRewardQueue, "reward_queue"},
	{tableJob, KindJob, "job"},
	{tableJobClients, KindJobChunk, "job_clients"},
	{tableWebhook, KindWebhook, "webhook"},
	{tableWebhookQueue, KindWebhookQueue, "webhook_queue"},
	{tableDaily, KindDaily, "daily"},
	{tableDeletion, KindDeletion, "deletion"},
	{tableDeletionQueue, KindDeletionQueue, "deletion_queue"},
	{tableAccessLog, KindAccessLog, "access_log"},
	{tableQuality, KindQuality, "quality"},
	{tableAbuse, KindAbuse, "abuse"},
	{tableQuarantine, KindQuarantine, "event_quarantine"},
	{tableHeldEvent, KindHeldEvent, "held_event"},
	{tableMeta, KindMeta, "meta"},
	{tableDamaged, KindDamaged, ""},
}

var tableByByte = func() map[byte]table {
	m := make(map[byte]table, len(tables))
	for _, t := range tables {
		m[t.b] = t
	}
	return m
}()

// KindOf returns the kind of a data key of tenant (KindUnknown when key is
// no data key of tenant's or its table byte is not registered).
func KindOf(tenant string, key []byte) Kind {
	p := len(tenant) + 2
	if len(key) <= p || key[0] != spaceTenant || string(key[1:p-1]) != tenant || key[p-1] != 0 {
		return KindUnknown
	}
	t, ok := tableByByte[key[p]]
	if !ok {
		return KindUnknown
	}
	if t.kind == KindMeta {
		rest := string(key[p+1:])
		switch {
		case len(rest) > len(metaCustomer) && rest[:len(metaCustomer)+1] == metaCustomer+"\x00":
			return KindCustomerState
		case len(rest) > len(metaHourly) && rest[:len(metaHourly)+1] == metaHourly+"\x00":
			return KindHourly
		}
	}
	return t.kind
}

// DescribeKey names, for admin output and logs, the table of a data key of
// tenant ("event", "features", ...; "table 'c'" for an unregistered table
// byte, "?" for a key too short to have one) and renders the key after the
// tenant prefix, quoted.
func DescribeKey(tenant string, key []byte) (table, text string) {
	p := len(tenant) + 2
	table = "?"
	if len(key) > p {
		table = "table " + strconv.QuoteRune(rune(key[p]))
		if t, ok := tableByByte[key[p]]; ok && t.name != "" {
			table = t.name
		}
	}
	if len(key) < p {
		return table, strconv.Quote(string(key))
	}
	return table, strconv.Quote(string(key[p:]))
}
