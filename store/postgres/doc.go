// Package postgres is the store.Store that several gateways share: Tollway's durable state in
// one PostgreSQL database (14 or later; tested on Debian's 15). It owns the schema and its
// migrations, the pool, the change listener and the SQL of every store concern; it passes the
// same conformance suite as store/bbolt (store/storetest), crash cases included. NewSettler is
// a Recorder writing straight to the database (bbolt's Settler through SettleWith: group
// commit, durable holds, retries, a database that cannot commit waited for rather than records
// dropped); the gateway records through store/spool instead, a local journal per replica that
// ships to SettleWith in batches, so no request waits on the database.
//
// # Connection
//
// Open takes a DSN (postgres://user:pass@host:5432/db?sslmode=...; TLS when sslmode asks) and
// keeps a bounded pgxpool (Options.MaxConns) plus one connection of its own for LISTEN. Every
// connection has statement_timeout and lock_timeout (Options.StatementTimeout) and
// idle_in_transaction_session_timeout; every call runs under a context deadline
// (Options.CallTimeout), so none takes unbounded time. Errors name the database as
// host:port/db, never the password, and an outage's error says what to check. A failure that is not the data's fault (unreachable,
// restarting, out of connections or room, a timeout, a standby) wraps store.ErrUnavailable and
// starts an outage (Health, store.CauseUnreachable) that the next commit or the listener's
// return ends; deadlocks and serialization failures are retried inside the call.
//
// # Schema
//
// migrations/NNN_name.sql, embedded (embed.FS) and applied by tern on Open under tern's
// pg_advisory_lock, so replicas starting at once against an empty database take turns; the
// version is in tollway_schema_version. Tables (001_initial.sql):
//
//	providers, models, routes    the catalog: key and source columns, the record as json
//	                             (json, not jsonb: a model's pricing keeps its text)
//	accounts                     id, balance NUMERIC, created_ns
//	api_keys                     id, hash (hex SHA-256 of the secret, as bbolt keeps it; the
//	                             secret is never stored), prefix, account, limits, rates
//	                             (rpm, tpm), times
//	usage_records                one row per request id (the primary key), cost and overage
//	                             NUMERIC, time as unix nanoseconds (at_ns), payment json
//	usage_daily, usage_route,    the aggregates kept for good: NUMERIC totals added by upsert
//	spend_month
//	holds                        the record a restart bills for a request never settled
//	tasks, task_images           task json with open/done_ns columns; inline images as bytea
//	callbacks, callback_secrets  the outbox by next_ns; each account's signing secret
//	pending_payments,            x402: settlements being resolved; used credentials (the
//	credentials                  primary key makes them single-use), kept until until_ns
//	rate_shares                  each replica's share of each rate-limited owner, in parts
//	                             per million, until expires_ns (ratelimit.go)
//
// Money is NUMERIC, read and written as shopspring decimals through pgtype.Numeric (the
// coefficient and exponent): exact, never float. Times are unix nanoseconds where bbolt keys
// by them (records, holds, callbacks, claims), so both stores order and return the same times.
//
// # Idempotency and exactness across replicas
//
// A settling transaction (settle.go) locks the accounts and month-spend rows its batch debits,
// each set in sorted order (batches of different replicas queue rather than deadlock), then
// inserts the records with ON CONFLICT (request_id) DO NOTHING RETURNING (after the lock, so
// none is being settled elsewhere): only a record inserted now is debited and counted, so a
// request is billed once whichever replica settles it and however often. Each debit is capped
// at the balance and the key's monthly limit as they stand under the lock (store.CapDebit),
// the record corrected in the same transaction. No statement looks records up by a list of
// ids: a prepared statement's generic plan made while the table was small can keep scanning
// all of it (TestShipmentsNeverScanTheRecords). Aggregates are added with INSERT ... ON CONFLICT DO UPDATE,
// in sorted order. A credential claim is INSERT ... ON CONFLICT DO NOTHING RETURNING: the one
// session that gets its row back won, on every replica. A task update locks its row (SELECT
// ... FOR UPDATE) and writes its callbacks and bill in the same transaction.
//
// # Change propagation
//
// A transaction that changes the catalog, a key or an account runs pg_notify('tollway_changes',
// '<origin> <topic>:<id>') before it commits; PostgreSQL delivers it at commit, in commit order,
// to every listening session, this process's included (changes.go). The listener hands each to
// the subscribers (store.Hub, which coalesces for a slow one), marked Local when the origin is
// this Store's own (a random mark made at Open), so the replica that wrote it need not apply it
// again. Notifications sent while the
// listener is disconnected are lost, so when it reconnects every subscriber gets one Change
// per topic without an ID: re-read everything.
//
// # Not yet here (issue 29)
//
// Tasks have no poller lease yet (store.Tasks has none to implement): OpenTasks lists every
// open task to every replica; the lease (lease_until, FOR UPDATE SKIP LOCKED) comes with the
// interface that asks for it. Holds written here have no owner: SettleHolds bills every hold in
// the database, so it is for a single gateway's start (the gateway's own holds live in each
// replica's spool, store/spool). Budget slices are the rest of the issue.
//
// # Replicas
//
// replicas (002_replicas.sql) is the registry of the gateways sharing the database: each
// upserts its row (name, version, started, last seen, lease) every third of its lease and
// deletes it when it stops cleanly; status shows a row silent past its lease as gone, and the
// live replicas delete rows gone for long (replicas.go).
package postgres
