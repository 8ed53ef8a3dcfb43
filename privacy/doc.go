// Package privacy carries out the customers' data rights and the backups
// they must reach: deletion (right to be forgotten: a durable queue, one
// eraser per table, compaction so the bytes leave the disk), export (right
// of access), the access log of exports, and backup and restore with the
// deletion ledger that keeps a restored backup from bringing a deleted
// customer back (contract sections 7 and 8).
//
// It sits above engine and store: it reads and erases the engine's tables
// through engine.Records (the engine keeps its codecs and locks) and the
// rest through store. cli builds one Service and one Backups per process
// and hands them to the server (DELETE /v1/clientes/{ref}, GET
// .../exportacion) and to the admin commands; they hold every lock, so the
// package has no global state.
package privacy
