package chat

import (
	"testing"

	"github.com/shopspring/decimal"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/internal/fixture"
)

// TestPaidCostIsCappedAtTheHold: a paid request (x402) is recorded, and an upto payment
// settled, at most its hold (the worst case priced at admission), whatever the provider
// reports; the rest is the record's overage.
func TestPaidCostIsCappedAtTheHold(t *testing.T) {
	rt := core.Compile(fixture.PricedGateway(t), nil)
	x := &Processor{x: &core.Exchange{RT: rt, Key: &core.KeyInfo{ID: "x402.s", Account: "x402.s"}},
		plan: &chatPlan{model: rt.Models["gpt"]}, paidHold: decimal.NewFromInt(32)}
	x.meter.body([]byte(`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1000000}}`))
	cost, rec := x.paidBill()
	if !cost.Equal(decimal.NewFromInt(32)) || !rec.Cost.Equal(cost) || !rec.Overage.Equal(decimal.NewFromInt(2_000_003-32)) {
		t.Fatalf("paid cost %s, record %+v: want the hold 32, the rest overage", cost, rec)
	}
	x.meter = meter{}
	x.meter.body([]byte(`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`))
	if cost, rec = x.paidBill(); !cost.Equal(decimal.NewFromInt(11)) || !rec.Overage.IsZero() {
		t.Fatalf("paid cost %s, record %+v: want the metered 11", cost, rec)
	}
}
