// Package store is the contract of Tollway's durable state: the records (providers, models,
// routes, API keys, accounts, usage records, media tasks and their callbacks, pending x402
// settlements), the rules every record must keep before it may be stored (Validate, NewKey,
// NewAccount, CapDebit ...), the sentinel errors callers tell failures apart by, and the
// interfaces the gateway reads and writes them through, one per concern (store.go): CatalogStore,
// Routes, Keys, Accounts, Ledger, Usage, Tasks, Callbacks, Payments, Credentials, Pruner,
// Health, Changes and Replicas, with Recorder for usage records written off the request path and Store
// for all of them at once.
//
// Implementations live in packages of their own: store/bbolt (one process owns one file; the
// default) and, for several gateways sharing one database, store/postgres. They import this
// package; consumers (extproc, extproc/tasks, the x402 settlements, the admin API, the config
// loader) import only this one and take the smallest interface they use, so no consumer
// depends on an engine and no import cycle can form. Only the wiring (cmd/tollway) chooses an
// implementation. An implementation exposes no transaction, bucket or table, and wraps
// ErrNotFound, ErrExists, ErrInvalid, ErrUnavailable (and the task errors) rather than its
// engine's errors. store/storetest is the conformance suite every implementation passes.
package store
