package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/store"
)

func TestRequestDone(t *testing.T) {
	m := New()
	t0 := time.Unix(1_800_000_000, 0)
	m.RequestDone(&extproc.Outcome{Endpoint: extproc.EndpointChat, Model: "gpt", Provider: "b", Route: "route:r", Stream: true,
		Status: 200, Attempts: 2, Fallback: true,
		Start: t0, Routed: t0.Add(time.Millisecond), Answered: t0.Add(11 * time.Millisecond), FirstByte: t0.Add(12 * time.Millisecond), End: t0.Add(time.Second)})
	m.RequestDone(&extproc.Outcome{Endpoint: extproc.EndpointChat, Model: "gpt", Status: 403, Code: "spend_limit_exceeded", Start: t0, End: t0.Add(time.Millisecond)})

	if v := testutil.ToFloat64(m.requests.WithLabelValues("chat", "gpt", "b", "route:r", "200", "")); v != 1 {
		t.Errorf("served: %v", v)
	}
	if v := testutil.ToFloat64(m.requests.WithLabelValues("chat", "gpt", "", "", "403", "spend_limit_exceeded")); v != 1 {
		t.Errorf("refused: %v", v)
	}
	if v := testutil.ToFloat64(m.attempts.WithLabelValues("gpt", "route:r")); v != 2 {
		t.Errorf("attempts: %v", v)
	}
	if v := testutil.ToFloat64(m.fallbacks.WithLabelValues("gpt", "b", "route:r")); v != 1 {
		t.Errorf("fallbacks: %v", v)
	}
	// Histograms: the upstream time is routed -> answered (10 ms), the first token 12 ms after
	// the start; the refused request has neither.
	if n := testutil.CollectAndCount(m.upstream); n != 1 {
		t.Errorf("upstream series: %d", n)
	}
	if got := histSum(t, m, "tollway_upstream_seconds"); got != 0.010 {
		t.Errorf("upstream time %v, want 0.010", got)
	}
	if got := histSum(t, m, "tollway_time_to_first_token_seconds"); got != 0.012 {
		t.Errorf("time to first token %v, want 0.012", got)
	}
	if got := histSum(t, m, "tollway_request_duration_seconds"); got != 1.001 {
		t.Errorf("request durations %v, want 1.001", got)
	}
}

// histSum is the sum of every series of a histogram.
func histSum(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, mm := range f.GetMetric() {
				s += mm.GetHistogram().GetSampleSum()
			}
		}
	}
	return s
}

// TestCostIsExact: cost is summed in decimal; a float counter would show 0.1 added ten times
// as 0.9999999999999999.
func TestCostIsExact(t *testing.T) {
	m := New()
	for range 10 {
		m.Usage(store.UsageRecord{Model: "gpt", Provider: "b", PromptTokens: 3, CompletionTokens: 4, Cost: decimal.RequireFromString("0.1")})
	}
	m.Usage(store.UsageRecord{Model: "gpt", Provider: "b", Cost: decimal.RequireFromString("-5")}) // never lowers the counter
	if v := testutil.ToFloat64(m.cost); v != 1 {
		t.Errorf("cost %v, want exactly 1", v)
	}
	if !m.CostTotal().Equal(decimal.NewFromInt(1)) {
		t.Errorf("exact total %s", m.CostTotal())
	}
	if v := testutil.ToFloat64(m.tokens.WithLabelValues("gpt", "b", "", "prompt")); v != 30 {
		t.Errorf("prompt tokens %v", v)
	}
	if v := testutil.ToFloat64(m.tokens.WithLabelValues("gpt", "b", "", "completion")); v != 40 {
		t.Errorf("completion tokens %v", v)
	}
	if v := testutil.ToFloat64(m.records.WithLabelValues("gpt", "b", "", "false")); v != 11 {
		t.Errorf("records %v", v)
	}
}

// TestOverageByProvider: what providers reported beyond the holds is counted in exact USD by
// provider (a task's and a request's alike), apart from what was billed.
func TestOverageByProvider(t *testing.T) {
	m := New()
	m.Usage(store.UsageRecord{Model: "wan", Provider: "dashscope", Cost: decimal.RequireFromString("0.6"), Overage: decimal.RequireFromString("99.4")})
	m.Usage(store.UsageRecord{Model: "gpt", Provider: "openai", Cost: decimal.RequireFromString("0.1")})
	m.TaskChanged(&store.Task{Kind: "video", Family: "V2", Status: "completed"}, "in_progress",
		&store.UsageRecord{Model: "wan", Provider: "dashscope", Cost: decimal.RequireFromString("0.6"), Overage: decimal.RequireFromString("0.1")})
	if v := testutil.ToFloat64(m.overage); v != 99.5 {
		t.Errorf("overage %v, want 99.5", v)
	}
	if !m.overage.total().Equal(decimal.RequireFromString("99.5")) || !m.CostTotal().Equal(decimal.RequireFromString("1.3")) {
		t.Errorf("overage %s, cost %s", m.overage.total(), m.CostTotal())
	}
	if n := testutil.CollectAndCount(m.overage, "tollway_overage_usd_total"); n != 1 {
		t.Errorf("%d overage series, want 1 (dashscope; openai reported nothing over)", n)
	}
}

func TestHoldsXDSAndTasks(t *testing.T) {
	m := New()
	m.Held(nil)
	m.Held(nil)
	m.Held(fmt.Errorf("wrapped: %w", billing.ErrSpendLimit))
	m.Held(fmt.Errorf("wrapped: %w", billing.ErrInsufficientCredits))
	m.Held(errors.New("disk on fire"))
	m.Ended(true)
	for phase, want := range map[string]float64{"taken": 2, "spend_limit_exceeded": 1, "insufficient_credits": 1, "error": 1} {
		if v := testutil.ToFloat64(m.holds.WithLabelValues(phase)); v != want {
			t.Errorf("holds %s: %v, want %v", phase, v, want)
		}
	}
	if v := testutil.ToFloat64(m.holdsOpen); v != 1 {
		t.Errorf("open holds %v, want 1", v)
	}
	m.Ended(false)
	if v := testutil.ToFloat64(m.holdsOpen); v != 0 {
		t.Errorf("open holds %v, want 0", v)
	}

	m.Pushed(false)
	m.Pushed(true)
	m.Acked("Cluster")
	m.Rejected("Listener")
	if testutil.ToFloat64(m.xdsPushes.WithLabelValues("change")) != 1 || testutil.ToFloat64(m.xdsPushes.WithLabelValues("rollback")) != 1 ||
		testutil.ToFloat64(m.xdsAcks.WithLabelValues("Cluster")) != 1 || testutil.ToFloat64(m.xdsNacks.WithLabelValues("Listener")) != 1 {
		t.Error("xDS counters")
	}

	task := &store.Task{Kind: "video", Family: "V1", Status: "queued"}
	m.TaskChanged(task, "", nil)
	task.Status = "completed"
	m.TaskChanged(task, "queued", &store.UsageRecord{Model: "hailuo", Provider: "minimax", Cost: decimal.RequireFromString("0.5")})
	if testutil.ToFloat64(m.taskChanges.WithLabelValues("video", "V1", "queued")) != 1 || testutil.ToFloat64(m.taskChanges.WithLabelValues("video", "V1", "completed")) != 1 {
		t.Error("task transitions")
	}
	if !m.CostTotal().Equal(decimal.RequireFromString("0.5")) {
		t.Errorf("a finished task's bill: %s", m.CostTotal())
	}
}

// TestLabelValuesAreBounded: past maxLabelValues distinct values, new ones are "other".
func TestLabelValuesAreBounded(t *testing.T) {
	m := New()
	for i := range maxLabelValues {
		if v := m.label("m" + strconv.Itoa(i)); v != "m"+strconv.Itoa(i) {
			t.Fatalf("value %d refused early: %q", i, v)
		}
	}
	if v := m.label("one-too-many"); v != "other" {
		t.Errorf("past the bound: %q", v)
	}
	if v := m.label("m7"); v != "m7" {
		t.Errorf("a value seen before: %q", v)
	}
	if v := m.label(""); v != "" {
		t.Errorf("empty: %q", v)
	}
}

func TestExpositionLints(t *testing.T) {
	m := New()
	m.RequestDone(&extproc.Outcome{Endpoint: "chat", Status: 200, Start: time.Now(), End: time.Now()})
	m.Usage(store.UsageRecord{Model: "gpt", Cost: decimal.RequireFromString("0.25")})
	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
