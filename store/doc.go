// Package store holds every tenant's data in one Pebble database and owns
// its bytes: the key layout (this comment, keys.go and one file per table),
// the tenant and credential records, and the primitives the engine, the
// batch runner and the privacy service build on (point reads, bounded
// prefix scans, synced batches, snapshots, checkpoints, metrics).
//
// No other package imports Pebble or builds a key: each table exports
// typed key functions (EventKey, CustomerEventSpan, ...) and key decoders
// (ParseCustomerEventKey, ...) and the generic builder is unexported, so
// the compiler proves that a key-format change is a change to this package
// alone. keys_test.go pins every table's bytes against golden values and
// fails when two tables' prefixes overlap.
//
// # Key layout
//
// The format is persistent: changing any byte here needs a migration, and
// a change an older release would misread raises Format (format.go).
//
// Every component that is a string is an identifier that matches the API's
// ID pattern (or the tenant pattern), so it never contains 0x00; components
// are written as the string followed by a 0x00 terminator, which keeps byte
// order equal to string order for the prefix scans. Integers are 8 bytes
// big-endian (signed ones with the sign bit flipped) so that byte order is
// numeric order; a time is its UnixNano as a signed integer.
//
//	0x01 'T' tenant 0x00                      tenant record (tenant.go)
//	0x01 'C' client_id 0x00                   credential record (credential.go)
//	0x01 'O' kind 0x00 ...                    operator console (console.go):
//	                                          'link'/'session' by SHA-256 of
//	                                          the token, 'audit' tenant, time,
//	                                          sequence
//	0x01 'P'                                  purge owed mark (wal.go)
//	0x01 'L' found-at time                    damaged-log note (logcheck.go)
//	0x01 'F'                                  store format mark (format.go)
//	0x01 'K'                                  fingerprint of keys.json's keys (secrets.go)
//	0x01 'N'                                  fingerprint of the keys a rotation is writing (secrets.go)
//	0x01 'W'                                  PurgeWAL's and PurgeManifest's round (wal.go)
//	0x01 'R' tenant 0x00                      a deleted tenant's tombstone (tenantdel.go)
//	0x02 tenant 0x00 <table> ...              tenant data, tables below
//
// Tables inside a tenant's key space (table byte, components → value; file):
//
//	'e' event_id → encoded event                                 events.go
//	'E' cliente_ref, ts, event_id → small event summary          events.go
//	'f' cliente_ref → encoded features                           features.go
//	'd' decision nonce → decision record                         decisions.go
//	'D' cliente_ref, ts, nonce → empty                           decisions.go
//	'a' cupon_emitido_id → attribution record                    attribution.go
//	'i' Idempotency-Key → idempotency record                     idempotency.go
//	'k' (single key) → catalog                                   campaigns.go
//	'p' campana_id → campaign                                    campaigns.go
//	'b' campana_id → budget counters                             campaigns.go
//	'm' [generation] → policy model (the newest, the last good)  model.go
//	'r' close time, kind, nonce → empty (learner queue)          rewards.go
//	'j' job_id → job record                                      jobs.go
//	'J' job_id, index → stored batch request chunk               jobs.go
//	'w' (single key) → webhook registration                      webhooks.go
//	'W' due time, delivery id → delivery                         webhooks.go
//	'q' day, counter name [, cliente_ref] → counter              daily.go
//	'x' keyed hash of cliente_ref → deletion record              deletions.go
//	'X' time, keyed hash → pending deletion                      deletions.go
//	'l' time, trace id → access-log entry                        accesslog.go
//	'Q' (single key) → data-quality counters                     quality.go
//	'A' client_id → abuse state                                  abuse.go
//	'z' time, trace id → quarantined event batch                 quarantine.go
//	'h' hash of event_id → held event's content hash, batch key  quarantine.go
//	'M' "cust", cliente_ref → customer decision state            meta.go
//	'M' "hourly", hour → tenant counters of one hour             meta.go
//	'U' original key from its table byte on → damaged record     damaged.go
//
// Deleting a tenant or reading all of its data is a bounded range over
// TenantSpan(tenant); a tenant's deletion (tenantdel.go) deletes that range
// and the global records that name it (its tenant and credential records,
// its console audit entries) and keeps its tombstone.
package store
