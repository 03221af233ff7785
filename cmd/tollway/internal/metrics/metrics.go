// Package metrics defines Tollway's Prometheus metrics (GET /metrics on the admin listener) and
// records them from the components' events: it implements the small observer interfaces of
// extproc (requests and ext_proc streams), extproc/billing (holds), xds (pushes, ACKs, NACKs)
// and takes usage records and task changes through callbacks that the server package wires. The
// components know nothing of Prometheus, and with metrics off (metrics.enabled: false) none of
// this runs. Only the server package (the wiring) and the admin API (GET /metrics) import it.
//
// Labels are bounded: catalog ids (models, providers, routes), a fixed set of endpoints,
// phases, task kinds, families and statuses, HTTP statuses and the gateway's own error codes.
// Never a key, an account or anything a client wrote; a label value past maxLabelValues
// distinct ones (a catalog that keeps changing) is counted as "other".
package metrics

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/x402/paid"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds"
)

// Latency buckets, in seconds: requests and upstream answers from 1 ms to 5 min (streams run
// long); ext_proc's own work from 25 us to 1 s.
var (
	latencyBuckets  = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	overheadBuckets = []float64{.000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
)

// maxLabelValues bounds the distinct values all free-form labels (model, provider, route,
// code) take together.
const maxLabelValues = 4096

// Metrics is every metric Tollway exports, in its own registry.
type Metrics struct {
	reg *prometheus.Registry

	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	upstream      *prometheus.HistogramVec
	ttft          *prometheus.HistogramVec
	overhead      *prometheus.HistogramVec
	attempts      *prometheus.CounterVec
	fallbacks     *prometheus.CounterVec
	streamsActive *prometheus.GaugeVec
	streams       *prometheus.CounterVec

	tokens  *prometheus.CounterVec
	records *prometheus.CounterVec
	cost    *decimalCounter
	overage *decimalCounter

	holds     *prometheus.CounterVec
	holdEnds  *prometheus.CounterVec
	holdsOpen prometheus.Gauge

	xdsPushes *prometheus.CounterVec
	xdsAcks   *prometheus.CounterVec
	xdsNacks  *prometheus.CounterVec

	taskChanges *prometheus.CounterVec

	settlements *prometheus.CounterVec

	seen  sync.Map // label value -> struct{}: the values admitted so far
	nseen atomic.Int64
}

var (
	_ extproc.Observer = (*Metrics)(nil)
	_ billing.Observer = (*Metrics)(nil)
	_ xds.Observer     = (*Metrics)(nil)
)

// New makes the metrics, registered with Go's runtime and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	m.requests = counter("tollway_requests_total",
		"Requests ext_proc saw, by endpoint, the catalog model and provider that answered, route, HTTP status the client got (0: none, the client left) and error code (\"\" on success).",
		"endpoint", "model", "provider", "route", "status", "code")
	m.duration = histogram("tollway_request_duration_seconds",
		"From a request's headers reaching ext_proc to the end of its answer (whole answers and streams).",
		latencyBuckets, "endpoint", "stream")
	m.upstream = histogram("tollway_upstream_seconds",
		"From ext_proc routing a request to its answer's headers coming back: Envoy's attempts (fallbacks and each attempt's rewrite included) and the provider's time to its first byte.",
		latencyBuckets, "model", "provider")
	m.ttft = histogram("tollway_time_to_first_token_seconds",
		"Streams: from a request's headers reaching ext_proc to the first chunk of its answer.",
		latencyBuckets, "model", "provider")
	m.overhead = histogram("tollway_gateway_overhead_seconds",
		"Time ext_proc spent working on one stream (auth, validation, the hold, rewrites, metering, settling), by phase: router (once per request) or attempt (once per upstream attempt). Waiting for Envoy, the client or a provider is not counted.",
		overheadBuckets, "phase")
	m.attempts = counter("tollway_upstream_attempts_total",
		"Upstream attempts Envoy made for answered requests (the answering one included), as Envoy reports them.",
		"model", "route")
	m.fallbacks = counter("tollway_fallbacks_total",
		"Requests answered by an attempt after the first (the chain fell back), by the model and provider that answered.",
		"model", "provider", "route")
	m.streamsActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tollway_extproc_streams_active",
		Help: "ext_proc streams open now, by phase (router: one per request; attempt: one per upstream attempt)."}, []string{"phase"})
	m.reg.MustRegister(m.streamsActive)
	m.streams = counter("tollway_extproc_streams_total", "ext_proc streams opened, by phase.", "phase")

	m.tokens = counter("tollway_tokens_total",
		"Tokens of usage records handed to the store, by direction: prompt (in) or completion (out).",
		"model", "provider", "route", "direction")
	m.records = counter("tollway_usage_records_total",
		"Usage records handed to the store (one per billed request or finished task); estimated: from a token count, the provider sent no usage.",
		"model", "provider", "route", "estimated")
	m.cost = newDecimalCounter("tollway_cost_usd_total",
		"Cost in USD of the usage records handed to the store: summed exactly in decimal, shown as the nearest float.",
		"model", "provider", "route")
	m.reg.MustRegister(m.cost)
	m.overage = newDecimalCounter("tollway_overage_usd_total",
		"What providers reported beyond the requests' holds, in USD, by provider: no settlement exceeds its hold, so this was not billed (take it up with the provider). Summed exactly in decimal.",
		"provider")
	m.reg.MustRegister(m.overage)

	m.holds = counter("tollway_holds_total",
		"Billing holds asked for: taken, or refused (insufficient_credits, spend_limit_exceeded, error).", "result")
	m.holdEnds = counter("tollway_hold_ends_total",
		"Billing holds ended: settled (billed at the request's cost) or released (nothing billed).", "end")
	m.holdsOpen = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollway_holds_open", Help: "Billing holds taken and not yet settled or released."})
	m.reg.MustRegister(m.holdsOpen)

	m.xdsPushes = counter("tollway_xds_pushes_total",
		"Snapshots pushed to Envoy: change (a new configuration) or rollback (the last accepted one pushed back after a rejection).", "reason")
	m.xdsAcks = counter("tollway_xds_acks_total", "ACKs from Envoy, by resource type.", "type")
	m.xdsNacks = counter("tollway_xds_nacks_total", "Snapshots Envoy rejected (NACK), by the resource type it refused.", "type")

	m.taskChanges = counter("tollway_task_transitions_total",
		"Media task status changes (created tasks count under their first status), by kind (video, image), family and the status taken.",
		"kind", "family", "status")

	m.settlements = counter("tollway_x402_settlements_total",
		"x402 settlements by outcome: settled (the facilitator settled it, at the request or later), refused (it refused: the result was withheld), pending (its answer was lost: the result was served and the settlement is resolved in the background; each later counts once more as settled or unpaid) or unpaid (a pending one that never settled).",
		"outcome")
	for _, o := range []string{paid.SettleSettled, paid.SettleRefused, paid.SettlePending, paid.SettleUnpaid} {
		m.settlements.WithLabelValues(o) // every outcome is exported, at zero until it happens
	}

	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is what GET /metrics serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// GaugeFunc registers a gauge read when scraped (open tasks, xDS versions).
func (m *Metrics) GaugeFunc(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// label admits v as a label value while fewer than maxLabelValues distinct ones were seen.
func (m *Metrics) label(v string) string {
	if v == "" {
		return v
	}
	if _, ok := m.seen.Load(v); ok {
		return v
	}
	if m.nseen.Add(1) > maxLabelValues {
		m.nseen.Add(-1)
		return "other"
	}
	if _, loaded := m.seen.LoadOrStore(v, struct{}{}); loaded {
		m.nseen.Add(-1)
	}
	return v
}

// StreamStarted counts an ext_proc stream opening.
func (m *Metrics) StreamStarted(phase string) {
	m.streams.WithLabelValues(phase).Inc()
	m.streamsActive.WithLabelValues(phase).Inc()
}

// StreamEnded counts an ext_proc stream closing and the work it took.
func (m *Metrics) StreamEnded(phase string, busy time.Duration) {
	m.streamsActive.WithLabelValues(phase).Dec()
	m.overhead.WithLabelValues(phase).Observe(busy.Seconds())
}

// RequestDone records one request's outcome.
func (m *Metrics) RequestDone(o *extproc.Outcome) {
	model, provider, route := m.label(o.Model), m.label(o.Provider), m.label(o.Route)
	m.requests.WithLabelValues(o.Endpoint, model, provider, route, strconv.Itoa(o.Status), m.label(o.Code)).Inc()
	if !o.End.IsZero() {
		m.duration.WithLabelValues(o.Endpoint, strconv.FormatBool(o.Stream)).Observe(o.End.Sub(o.Start).Seconds())
	}
	if !o.Routed.IsZero() && !o.Answered.IsZero() {
		m.upstream.WithLabelValues(model, provider).Observe(o.Answered.Sub(o.Routed).Seconds())
	}
	if o.Stream && !o.FirstByte.IsZero() {
		m.ttft.WithLabelValues(model, provider).Observe(o.FirstByte.Sub(o.Start).Seconds())
	}
	if o.Attempts > 0 {
		m.attempts.WithLabelValues(model, route).Add(float64(o.Attempts))
	}
	if o.Fallback {
		m.fallbacks.WithLabelValues(model, provider, route).Inc()
	}
}

// Usage records a usage record handed to the store: its tokens, its exact cost and overage.
func (m *Metrics) Usage(r store.UsageRecord) {
	model, provider, route := m.label(r.Model), m.label(r.Provider), m.label(r.Route)
	m.tokens.WithLabelValues(model, provider, route, "prompt").Add(float64(r.PromptTokens))
	m.tokens.WithLabelValues(model, provider, route, "completion").Add(float64(r.CompletionTokens))
	m.records.WithLabelValues(model, provider, route, strconv.FormatBool(r.Estimated)).Inc()
	m.cost.add(r.Cost, model, provider, route)
	if r.Overage.IsPositive() {
		m.overage.add(r.Overage, provider)
	}
}

// CostTotal is the exact sum of every cost recorded (for tests).
func (m *Metrics) CostTotal() decimal.Decimal { return m.cost.total() }

// TaskChanged records a media task's new status; a task that ended billed also leaves its
// usage record.
func (m *Metrics) TaskChanged(t *store.Task, _ string, usage *store.UsageRecord) {
	m.taskChanges.WithLabelValues(t.Kind, m.label(t.Family), t.Status).Inc()
	if usage != nil {
		m.Usage(*usage)
	}
}

// Settlement counts an x402 settlement's outcome (paid.SettleSettled, ...).
func (m *Metrics) Settlement(outcome string) { m.settlements.WithLabelValues(outcome).Inc() }

// Held counts a hold asked of the ledger.
func (m *Metrics) Held(err error) {
	switch {
	case err == nil:
		m.holds.WithLabelValues("taken").Inc()
		m.holdsOpen.Inc()
	case errors.Is(err, billing.ErrInsufficientCredits):
		m.holds.WithLabelValues("insufficient_credits").Inc()
	case errors.Is(err, billing.ErrSpendLimit):
		m.holds.WithLabelValues("spend_limit_exceeded").Inc()
	default:
		m.holds.WithLabelValues("error").Inc()
	}
}

// Ended counts a hold settled or released.
func (m *Metrics) Ended(settled bool) {
	end := "released"
	if settled {
		end = "settled"
	}
	m.holdEnds.WithLabelValues(end).Inc()
	m.holdsOpen.Dec()
}

// Pushed counts a snapshot pushed to Envoy.
func (m *Metrics) Pushed(rollback bool) {
	reason := "change"
	if rollback {
		reason = "rollback"
	}
	m.xdsPushes.WithLabelValues(reason).Inc()
}

// Acked counts Envoy accepting a snapshot's resources of one type.
func (m *Metrics) Acked(kind string) { m.xdsAcks.WithLabelValues(kind).Inc() }

// Rejected counts Envoy refusing a snapshot.
func (m *Metrics) Rejected(kind string) { m.xdsNacks.WithLabelValues(kind).Inc() }
