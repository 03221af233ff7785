package ir

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Route rules (docs/api.md#routes).
const (
	RulePriorityFallback = "priority_fallback"
	RuleModeMapping      = "mode_mapping"
	RouteActive          = "active"
	RoutePaused          = "paused"
	RoutePrefix          = "route:"
)

// Modes of a mode-mapping route; balanced is the default.
var Modes = []string{"fast", "balanced", "deep"}

// Route is a stable id (route:<slug>) behind which Tollway picks models and providers.
type Route struct {
	Name   string            `json:"name"`
	ID     string            `json:"id"` // route:<slug>, fixed at creation
	Rule   string            `json:"rule"`
	Models []string          `json:"models,omitempty"` // priority order (priority_fallback)
	Modes  map[string]string `json:"modes,omitempty"`  // mode -> model (mode_mapping)
	Status string            `json:"status"`
	// RateLimits caps every request through the route, all keys together (ext_proc enforces
	// them on top of each key's own).
	RateLimits RateLimits `json:"rateLimits,omitzero"`
}

var slugUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// Slug turns a route name into the id's part: lowercase letters and digits joined by '-'.
func Slug(name string) string {
	return strings.Trim(slugUnsafe.ReplaceAllString(strings.ToLower(name), "-"), "-")
}

// Chain is an ordered list of attempts Envoy walks for one request: a cluster with one priority
// level per target, retried down the priorities. Every model has one (its providers in order);
// every priority-fallback route has one (its models' providers in order).
type Chain struct {
	Cluster string    `json:"cluster"`
	Targets []Attempt `json:"targets"`
}

// Attempt is one (catalog model, provider) pair of a chain.
type Attempt struct {
	Model    string `json:"model"`    // catalog model id
	Provider string `json:"provider"` // provider name
}

// ModelChainCluster and RouteChainCluster name the chain clusters.
func ModelChainCluster(model string) string { return "chain.model." + model }
func RouteChainCluster(route *Route) string { return "chain." + route.ID }

// Chains lists the attempt chains of g, models first, in a stable order. Providers that cannot
// take traffic (no credential) are left out: an attempt on them could only fail with a 401,
// which Envoy rightly does not retry.
func (g *Gateway) Chains() []Chain {
	ready := make(map[string]bool, len(g.Providers))
	for i := range g.Providers {
		ready[g.Providers[i].Name] = g.Providers[i].Ready()
	}
	attempts := func(m *Model) []Attempt {
		var out []Attempt
		for _, t := range m.Targets {
			if ready[t.Provider] {
				out = append(out, Attempt{Model: m.ID, Provider: t.Provider})
			}
		}
		return out
	}
	byID := make(map[string]*Model, len(g.Models))
	var out []Chain
	for i := range g.Models {
		m := &g.Models[i]
		byID[m.ID] = m
		out = append(out, Chain{Cluster: ModelChainCluster(m.ID), Targets: attempts(m)})
	}
	for i := range g.Routes {
		r := &g.Routes[i]
		if r.Rule != RulePriorityFallback {
			continue
		}
		c := Chain{Cluster: RouteChainCluster(r)}
		for _, id := range r.Models {
			if m := byID[id]; m != nil {
				c.Targets = append(c.Targets, attempts(m)...)
			}
		}
		out = append(out, c)
	}
	return out
}

// validateRoutes checks routes against the models (byID); bad is Validate's error collector.
func (g *Gateway) validateRoutes(models map[string]bool, byID map[string]*Model, bad func(string, ...any)) {
	seen := map[string]bool{}
	for _, r := range g.Routes {
		name := QuoteShort(r.Name)
		switch {
		case r.Name == "" || Slug(r.Name) == "":
			bad("route %s: a name with letters or digits is required", name)
			continue
		case len(r.Name) > MaxRouteNameLength:
			bad("route %s: the name is longer than %d bytes", name, MaxRouteNameLength)
			continue
		case CheckText("name", r.Name, MaxRouteNameLength) != nil:
			bad("route %s: the name must not contain control characters", name)
			continue
		case !strings.HasPrefix(r.ID, RoutePrefix):
			bad("route %s: id %s must start with %s", name, QuoteShort(r.ID), RoutePrefix)
		case seen[r.ID]:
			bad("route %s: id %s is already used by another route; rename one", name, r.ID)
		}
		seen[r.ID] = true
		if r.Status != RouteActive && r.Status != RoutePaused {
			bad("route %s: status %s must be active or paused", name, QuoteShort(r.Status))
		}
		switch r.Rule {
		case RulePriorityFallback:
			if len(r.Models) == 0 {
				bad("route %s: priority_fallback needs models: [first, second, ...]", name)
			}
			if len(r.Modes) > 0 {
				bad("route %s: modes belong to rule mode_mapping, not priority_fallback", name)
			}
			if len(r.Models) > MaxListLength {
				bad("route %s: has %d models, at most %d", name, len(r.Models), MaxListLength)
				continue
			}
			for _, m := range r.Models {
				if !models[m] {
					bad("route %s: model %s is not in the catalog", name, QuoteShort(m))
				}
			}
		case RuleModeMapping:
			if len(r.Models) > 0 {
				bad("route %s: mode_mapping takes modes: {fast: m1, balanced: m2, deep: m3}, not models", name)
			}
			if len(r.Modes) == 0 {
				bad("route %s: mode_mapping needs modes: {fast: ..., balanced: ..., deep: ...}", name)
			}
			if _, ok := r.Modes["balanced"]; !ok && len(r.Modes) > 0 {
				bad("route %s: mode_mapping needs a balanced mode (the default when route_mode is omitted)", name)
			}
			for mode, m := range r.Modes {
				if !validMode(mode) {
					bad("route %s: mode %s is not one of %s", name, QuoteShort(mode), strings.Join(Modes, ", "))
				}
				if !models[m] {
					bad("route %s: mode %s: model %s is not in the catalog", name, QuoteShort(mode), QuoteShort(m))
				}
			}
		default:
			bad("route %s: rule %s must be %s or %s", name, QuoteShort(r.Rule), RulePriorityFallback, RuleModeMapping)
		}
		if mixed := mixedKinds(r, byID); mixed != "" {
			bad("route %s: its models must all answer one endpoint (chat, embeddings, video or image), not %s; make one route per kind", name, mixed)
		}
	}
}

// mixedKinds names the kinds of a route's models when they do not answer one endpoint, else "".
// Chat models and I3 image models (which answer chat too) make a chat route.
func mixedKinds(r Route, byID map[string]*Model) string {
	seen := map[string][]string{}
	var order []string
	chats := true
	for _, id := range slices.Concat(r.Models, slices.Sorted(maps.Values(r.Modes))) {
		m := byID[id]
		if m == nil || slices.Contains(seen[m.Kind()], id) {
			continue // not in the catalog (said above), or named twice
		}
		if seen[m.Kind()] == nil {
			order = append(order, m.Kind())
		}
		seen[m.Kind()] = append(seen[m.Kind()], id)
		chats = chats && m.Chats()
	}
	if len(order) < 2 || chats {
		return ""
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, k+" ("+strings.Join(seen[k], ", ")+")")
	}
	return strings.Join(parts, " and ")
}
func validMode(m string) bool {
	for _, v := range Modes {
		if v == m {
			return true
		}
	}
	return false
}

// ValidMode reports whether m is a route mode.
func ValidMode(m string) bool { return validMode(m) }

// Names the router-level ext_proc, the route and the upstream ext_proc agree on.
const (
	// ClusterHeader names the cluster a request goes to; set by ext_proc, read by the route.
	ClusterHeader = "x-tollway-cluster"
	// TaskHeader marks a task request the gateway sends itself through the internal listener:
	// the per-attempt filter lets it pass as it is (clients' x-tollway-* headers are removed at
	// the public listener, so no client can send one).
	TaskHeader = "x-tollway-task"
	// ModelHeader carries the catalog model of a request pinned to one provider to the
	// upstream ext_proc (chain endpoints carry their model as metadata instead).
	ModelHeader = "x-tollway-model"
	// ServedHeader is set on the answer by the upstream ext_proc: "<provider>/<model>" of the
	// attempt that answered, read (and replaced) by the router-level ext_proc.
	ServedHeader = "x-tollway-served"
	// AttemptRemovedHeader is set on the answer by the upstream ext_proc of an attempt on a
	// provider in another API: the nested request fields its adapter dropped (comma-separated
	// paths), merged into x-tollway-removed-params by the router-level ext_proc.
	AttemptRemovedHeader = "x-tollway-attempt-removed"
	// AttemptsHeader is set on the answer by the route: how many attempts Envoy made (the
	// answering one included), read and removed by the router-level ext_proc.
	AttemptsHeader = "x-tollway-attempts"
	// MetadataNamespace holds an endpoint's provider and model, and the dynamic metadata
	// ext_proc sets on a request for the access log (account, model, tokens, cost...).
	MetadataNamespace = "tollway"
	// PhaseMetadata is the gRPC metadata key telling ext_proc which filter a stream comes from.
	PhaseMetadata = "x-tollway-phase"
	PhaseUpstream = "upstream"
	// PhaseRouter marks the router-level filter of an Envoy whose routes and clusters Tollway
	// pushes: only there is a request rewritten for its provider and sent to that provider's
	// cluster by the router-level filter itself. A filter without it (an Istio sidecar's) routes
	// nothing: the mesh sends the request where it was going, as the client sent it.
	PhaseRouter = "router"
	// ErrorCodeDetailsPrefix starts the response code details of every reply ext_proc answers
	// itself, so Envoy's local-reply mappers leave those bodies alone.
	ErrorCodeDetailsPrefix = "tollway_"
	// RefusalProviderTag carries, in the access log of an attempt a provider answered 401, the
	// provider's name (from the endpoint's metadata).
	RefusalProviderTag = "tollway_provider"
	// RefusalLogName names the access log stream those attempts arrive on.
	RefusalLogName = "tollway_refused_credentials"

	// The split answer (Gateway.FastLane): the router-level filter handles the request and
	// leaves the answer to a filter chosen by the route it picks: the chunk lane's
	// (PhaseAnswer, every chunk through ext_proc as before) or the fast lane's (PhaseAnswer
	// too, its headers only: the body is metered in Envoy by the stream meter, and the bill
	// settled from the answer log). LaneHeader names the lane to the route (fast or absent).
	PhaseAnswer = "answer"
	// SplitMetadata (gRPC metadata "1") marks a split gateway's router-level filter: its
	// requests' answers go to the answer filters.
	SplitMetadata = "x-tollway-split"
	LaneHeader    = "x-tollway-lane"
	LaneFast      = "fast"
	LaneDeferred  = "deferred" // the unrouted reply to a request refused at its next message
	ExchangeKey   = "exchange" // in MetadataNamespace: the request's exchange, for the answer's filter and log
	CostKey       = "cost"     // in MetadataNamespace: the request's bill, once ext_proc knows it
	LaneMetadata  = "tollway.lane"
	// MeterMetadata is what the stream meter (Envoy's Lua) read of a fast-lane answer.
	MeterMetadata = "tollway.meter"
	// MeterLagBytes bounds how far the stream meter's text_bytes may lag behind a stream: a
	// stream its client cut may have passed up to MeterLagBytes-1 bytes of text more.
	MeterLagBytes = 64
	// AnswerLogName names the access log stream on which each split request's end arrives.
	AnswerLogName = "tollway_answers"
	// AnswerHeadersMetadata is what Envoy copied of the provider's answer headers (keys
	// AnswerStatusKey, AnswerServedKey, AnswerAttemptsKey) before any answer filter read them:
	// the answer log names the answer a provider cut before its answer filter had its headers.
	AnswerHeadersMetadata = "tollway.answer_headers"
	AnswerStatusKey       = "status"
	AnswerServedKey       = "served"
	AnswerAttemptsKey     = "attempts"
)

// MeterReportEvery is how often the answer log reports a fast-lane stream still open (Envoy's
// periodic access log entries), so its progress is checkpointed as the chunk lane's is: what a
// restart bills if the stream is cut with the gateway. Half extproc's checkpoint interval (1 s),
// so a checkpoint is due at the latest half an interval late.
const MeterReportEvery = 500 * time.Millisecond

// AccessLogFields are the access log's fields, in MetadataNamespace, that ext_proc sets (the
// translator's log format reads them; ext_proc writes a fast-lane stream's line itself).
var AccessLogFields = []string{"account", "key_prefix", "model", "provider", "route", "code",
	"prompt_tokens", "completion_tokens", "cost", "estimated", "fallbacks", "endpoint", "payer"}
