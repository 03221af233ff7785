package store

import "github.com/shopspring/decimal"

// LedgerCopy is the money a store keeps that its interfaces write only by settling: accounts as
// they stand (balance, creation), the usage records, the aggregates kept for good (which
// outlive pruned records), each key's spend per month, open holds and the accounts' callback
// signing secrets. `tollway store migrate` reads it from one store and imports it into another
// as it is, nothing settled again.
type LedgerCopy struct {
	Accounts   []Account
	Records    []UsageRecord
	Daily      []UsageRow            // per day, key, account and model
	Routes     map[string][]UsageRow // per route, by model (RouteUsage)
	MonthSpend map[string]map[string]decimal.Decimal
	Holds      []UsageRecord
	Secrets    map[string]string // account -> callback signing secret
}
