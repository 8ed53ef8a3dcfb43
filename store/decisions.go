package store

import "time"

// Decisions: the decision records ('d', by nonce; confirmations live in
// them) and the customer decision index ('D', by cliente_ref, time, nonce).
// The engine owns the record codec.

// DecisionKey is the key of the decision record of nonce.
func DecisionKey(tenant, nonce string) []byte {
	return appendStr(tableKey(tenant, tableDecision, len(nonce)+1), nonce)
}

// DecisionSpan bounds the tenant's decision records.
func DecisionSpan(tenant string) (lower, upper []byte) { return tableSpan(tenant, tableDecision) }

// DecisionNonceSpan bounds the decision records whose nonce starts with
// prefix (raw bytes, no terminator): the engine's check that a nonce time
// is free.
func DecisionNonceSpan(tenant, prefix string) (lower, upper []byte) {
	lower = append(tableKey(tenant, tableDecision, len(prefix)), prefix...)
	return lower, prefixEnd(lower)
}

// CustomerDecisionKey is the customer decision index entry of nonce, of
// customer ref decided at at.
func CustomerDecisionKey(tenant, ref string, at time.Time, nonce string) []byte {
	return customerIndexKey(tenant, tableCustomerDecide, ref, at, nonce)
}

// CustomerDecisionSpan bounds the customer decision index entries of ref.
func CustomerDecisionSpan(tenant, ref string) (lower, upper []byte) {
	return tableSpan(tenant, tableCustomerDecide, ref)
}

// CustomerDecisionIndexSpan bounds the whole customer decision index of
// tenant, in cliente_ref order.
func CustomerDecisionIndexSpan(tenant string) (lower, upper []byte) {
	return tableSpan(tenant, tableCustomerDecide)
}

// ParseCustomerDecisionKey decodes a customer decision index key of tenant.
func ParseCustomerDecisionKey(tenant string, key []byte) (ref string, at time.Time, nonce string, ok bool) {
	return parseCustomerIndex(tenant, key)
}
