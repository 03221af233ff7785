// Package adminapi holds the admin API's wire types: the bodies the handlers (package admin)
// take and answer with and the CLI (package cli) sends and reads, declared once here. Store
// records (store.Route, store.Account, usage) appear in them as the store keeps them; the
// conversions from requests to records are at the edges (Route.StoreRoute, the handlers).
package adminapi

import (
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
)

// List is the answer of the list endpoints: {"data": [...]}.
type List[T any] struct {
	Data []T `json:"data"`
}

// Error is the answer to a request the admin API refuses, whatever its status.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what was refused: code is stable (docs/api.md#errors), message says
// the problem and its fix, request_id names the request in the gateway's log.
type ErrorBody struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
}

// Key is a key as the admin API shows it: never the secret's hash; the secret itself only in
// the answer that created or rotated it.
type Key struct {
	ID           string           `json:"id"`
	Prefix       string           `json:"prefix"`
	Account      string           `json:"account"`
	Name         string           `json:"name,omitempty"`
	MonthlyLimit *decimal.Decimal `json:"monthly_limit,omitempty"`
	// SpentThisMonth is what the key spent in the current month (UTC), what its monthly limit
	// counts; in lists and limit changes only.
	SpentThisMonth *decimal.Decimal `json:"spent_this_month,omitempty"`
	Models         []string         `json:"models,omitempty"`
	// RateLimits are the key's own rates (unset ones take the configuration's default).
	RateLimits *store.RateLimits `json:"rate_limits,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	RevokedAt  *time.Time        `json:"revoked_at,omitempty"`
	Secret     string            `json:"key,omitempty"` // only in the create/rotate answer, once
}

// KeyList is GET /admin/v1/keys: every key with its spend in month (UTC).
type KeyList struct {
	Data  []Key  `json:"data"`
	Month string `json:"month"`
}

// KeyRequest is the body of POST /admin/v1/keys.
type KeyRequest struct {
	Account      string            `json:"account"`
	Name         string            `json:"name"`
	MonthlyLimit *decimal.Decimal  `json:"monthly_limit"`
	Models       []string          `json:"models"`
	RateLimits   *store.RateLimits `json:"rate_limits"`
}

// KeyLimits is the body of PUT (both settings, replaced together) and PATCH (the settings it
// names) /admin/v1/keys/{id}/limits. No monthly_limit (or null) means no limit; no models (or
// []) means every model; no rate_limits (or null) leaves both rates unset, and a PATCH's
// rate_limits changes the rates it names (null: unset).
type KeyLimits struct {
	MonthlyLimit *decimal.Decimal  `json:"monthly_limit"`
	Models       []string          `json:"models"`
	RateLimits   *store.RateLimits `json:"rate_limits"`
}

// Account is an account with what it can still spend right now (balance less open holds).
type Account struct {
	store.Account
	Available *decimal.Decimal `json:"available,omitempty"`
	// CallbackSecret signs the account's task callbacks (x-tollway-signature); a secret, shown
	// only on the admin API and never logged.
	CallbackSecret string `json:"callback_secret,omitempty"`
}

// AccountRequest is the body of POST /admin/v1/accounts.
type AccountRequest struct {
	ID      string          `json:"id"`
	Credits decimal.Decimal `json:"credits"`
}

// Credit is the body of POST /admin/v1/accounts/{id}/credit.
type Credit struct {
	Amount *decimal.Decimal `json:"amount"`
}

// RouteView is a route as GET /admin/v1/routes and `tollway routes list` show it: with its
// health (from its models' providers, as Envoy sees them) and its usage so far, by model.
type RouteView struct {
	store.Route
	Health string           `json:"health"` // healthy, degraded or down
	Usage  []store.UsageRow `json:"usage"`
}

// RoutePatch is the body of PATCH /admin/v1/routes/{id}: the rates it names change (null: no
// limit; "rate_limits": null removes both), the others are kept.
type RoutePatch struct {
	RateLimits *store.RateLimits `json:"rate_limits"`
}

// RouteStatus is the body of PUT /admin/v1/routes/{id}/status.
type RouteStatus struct {
	Status string `json:"status"`
}

// SignIn is the body of POST /console/api/session.
type SignIn struct {
	Token string `json:"token"`
}

// Status is GET /admin/v1/status: the configuration's delivery (xds.Status) and, for `tollway
// status`, the rest of a one-screen summary.
type Status struct {
	xds.Status
	Listeners struct {
		Public  string `json:"public"`
		Admin   string `json:"admin"`
		XDS     string `json:"xds,omitempty"`     // envoy.mode external: where Envoys reach ADS
		ExtProc string `json:"extproc,omitempty"` // and ext_proc
	} `json:"listeners"`
	Envoy EnvoyStatus `json:"envoy"`
	// Nodes are the Envoys the control plane serves (Tollway's own is node "tollway"), each
	// with its configuration version and its last rejection.
	Nodes     []xds.NodeStatus `json:"nodes"`
	Providers []ProviderHealth `json:"providers"`
	Models    struct {
		Total int `json:"total"`
		Ready int `json:"ready"`
	} `json:"models"`
	Store StoreStatus `json:"store"`
	// Replicas are the gateways sharing the store, by name (on bbolt: this one alone).
	Replicas []ReplicaStatus `json:"replicas"`
	// Today is the usage settled since midnight UTC (the daily aggregates' day).
	Today struct {
		Day string `json:"day"`
		store.UsageTotals
	} `json:"today"`
}

// StoreStatus is whether the store can make records durable (state "ok" or "unavailable": a
// full, read-only or failing disk, when billable work is refused with 503 store_unavailable).
type StoreStatus struct {
	Driver string     `json:"driver"` // store.driver: bbolt or postgres
	State  string     `json:"state"`
	Cause  string     `json:"cause,omitempty"` // disk full, read-only filesystem, I/O error, write failed
	Error  string     `json:"error,omitempty"` // what the filesystem said
	Since  *time.Time `json:"since,omitempty"`
	// Reserve says whether the reserve file beside the store is in place ("held"), was spent
	// writing what was answered when the disk filled ("released"), or is not kept ("none").
	Reserve string `json:"reserve"`
	// Queued are usage records and holds waiting to be written.
	Queued int `json:"queued"`
	// Database is the shared database's state (driver postgres only).
	Database *DatabaseStatus `json:"database,omitempty"`
	// Spool is this replica's local journal of usage records in front of the database (driver
	// postgres only): State above is whether it takes records.
	Spool *SpoolStatus `json:"spool,omitempty"`
}

// DatabaseStatus is the shared database as this replica last found it: "reachable", or
// "unreachable" since Since (usage records keep spooling; admin writes fail with 503
// store_unavailable).
type DatabaseStatus struct {
	At    string     `json:"at"` // host:port/database, never the password
	State string     `json:"state"`
	Since *time.Time `json:"since,omitempty"`
	Error string     `json:"error,omitempty"`
}

// SpoolStatus is the replica's spool: Records spooled and not yet shipped to the database, the
// oldest's time and age (LagSeconds: the lag), holds of requests being served, records shipped
// since start, and records the database refused on their own (kept in the spool).
type SpoolStatus struct {
	Path       string     `json:"path"`
	Records    int64      `json:"records"`
	Oldest     *time.Time `json:"oldest,omitempty"`
	LagSeconds float64    `json:"lag_seconds"`
	Holds      int64      `json:"holds"`
	Shipped    int64      `json:"shipped"`
	Rejected   int64      `json:"rejected"`
}

// ReplicaStatus is a gateway sharing the store, as it last renewed its registration. Gone: it
// has been silent for longer than its lease (killed, partitioned); it is dropped from the list
// after 20 leases. Self marks the replica that answered.
type ReplicaStatus struct {
	Name      string    `json:"name"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	Gone      bool      `json:"gone"`
	Self      bool      `json:"self,omitempty"`
}

// EnvoyStatus is the Envoy this gateway runs.
type EnvoyStatus struct {
	PID     int    `json:"pid,omitempty"`
	Version string `json:"version,omitempty"`
	// State is Envoy's own (LIVE, DRAINING...), "exited" once the process is gone, or
	// "unknown" when its admin endpoint does not answer.
	State  string `json:"state"`
	Uptime int64  `json:"uptime_seconds,omitempty"`
	Error  string `json:"error,omitempty"`
	// Restarts is how many times the supervisor restarted the child Envoy, LastExit why the
	// last one exited.
	Restarts int    `json:"restarts"`
	LastExit string `json:"last_exit,omitempty"`
}

// ProviderHealth is a provider as GET /admin/v1/health shows it.
type ProviderHealth struct {
	Name   string       `json:"name"`
	Type   string       `json:"type"`
	Source store.Source `json:"source"`
	// Credential: its credential resolved, or it needs none. Without one it takes no traffic.
	Credential bool `json:"credential"`
	// Health is Envoy's health check of it: healthy, unhealthy, or unknown (no reading yet, or
	// no cluster: a provider without a credential).
	Health string `json:"health"`
	// Refused is set while the provider refuses the gateway's credential: its models are not
	// ready (is_ready false) until it accepts it again.
	Refused *extproc.ProviderRefusal `json:"refused,omitempty"`
	Models  []string                 `json:"models"` // catalog models it serves
}

// ModelHealth is a catalog model's readiness (as is_ready in GET /v1/models) and providers.
type ModelHealth struct {
	ID        string   `json:"id"`
	Ready     bool     `json:"ready"`
	Providers []string `json:"providers"`
}

// GroupedRow is one group of GET /admin/v1/usage/grouped: its value for each grouping
// dimension ("route" is "" for requests that named a model), and its totals.
type GroupedRow struct {
	Group map[string]string `json:"group"`
	store.UsageTotals
}

// GroupedUsage is the answer of GET /admin/v1/usage/grouped.
type GroupedUsage struct {
	By []string `json:"by"`
	// Source is "aggregates" (the daily totals `tollway usage` reads, kept for good) or
	// "records" (the usage records, which alone know the route, kept
	// store.usage_retention_days: RecordsKeptDays, 0 for good).
	Source          string            `json:"source"`
	RecordsKeptDays int               `json:"records_kept_days"`
	Since           string            `json:"since,omitempty"`
	Until           string            `json:"until,omitempty"`
	Rows            []GroupedRow      `json:"rows"`
	Totals          store.UsageTotals `json:"totals"`
}
