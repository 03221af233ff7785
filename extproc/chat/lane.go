package chat

// The lanes of a split gateway's answer (xds/translator's answers.go): an OpenAI-shaped stream
// goes on the fast lane, metered in Envoy by the stream meter and billed from the answer log
// (SettleFromLog); every other answer on the chunk lane, through ext_proc chunk by chunk as on
// a gateway that is not split.

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/extproc/apischema/openai"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/xds/ir"
)

// fastLane reports whether the planned request's answer can skip ext_proc chunk by chunk: a
// stream whose every possible provider speaks OpenAI's chat API (no translation), unpaid (an
// upto payment settles inside the stream), and whose usage chunk the client did not ask for
// (the gateway adds it when a provider sends none, which only the chunk lane can).
func (c *Processor) fastLane() bool {
	p := c.plan
	if !p.stream || p.clientUsage || c.pay != nil {
		return false
	}
	rt := c.x.RT
	if p.pinned != "" {
		pr := rt.Providers[p.pinned]
		return pr != nil && pr.SpeaksOpenAI()
	}
	chain := rt.Chains[p.cluster]
	for _, t := range chain {
		if pr := rt.Providers[t.Provider]; pr == nil || !pr.SpeaksOpenAI() {
			return false
		}
	}
	return len(chain) > 0
}

// handOver parks a routed request's exchange for its answer's filter (a split gateway): the
// route it takes says the lane, the metadata names the exchange.
func (c *Processor) handOver(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	x := c.x
	c.fast = c.fastLane()
	id := x.Park(c.fast)
	if c.fast {
		mut := resp.GetRequestBody().GetResponse().GetHeaderMutation()
		mut.SetHeaders = append(mut.SetHeaders, core.SetHeader(ir.LaneHeader, ir.LaneFast))
	}
	core.AddMetadata(resp, ir.MetadataNamespace, map[string]*structpb.Value{ir.ExchangeKey: structpb.NewStringValue(id)})
	return resp
}

// fastAnswer is the fast lane's answer headers: the stream meter in Envoy is told what to
// write in the chunks (the catalog model, whether to drop the usage chunk the gateway asked
// for, the request id of an error event), and the bill waits for the answer log.
func (c *Processor) fastAnswer(resp *extprocv3.ProcessingResponse) {
	c.byLog = true
	core.AddMetadata(resp, ir.LaneMetadata, map[string]*structpb.Value{
		"fast":       structpb.NewBoolValue(true),
		"model":      structpb.NewStringValue(c.plan.model.ID),
		"drop_usage": structpb.NewBoolValue(c.plan.stream && !c.plan.clientUsage),
		"request_id": structpb.NewStringValue(c.x.RequestID),
	})
}

// ByLog reports whether the answer's bill waits for the answer log (a fast-lane stream).
func (c *Processor) ByLog() bool { return c.byLog }

// MeterReport is what the stream meter read of a fast-lane answer (ir.MeterMetadata), from its
// answer log entry.
type MeterReport struct {
	Usage                                     bool
	PromptTokens, CompletionTokens            int64
	CachedTokens, ImageTokens                 int64
	TextBytes                                 int64
	Finished, Done, Error, Ended, ClientReset bool
}

// SettleFromLog bills a fast-lane stream at its end from what the stream meter read: the
// provider's usage when it came (exact, as on the chunk lane), else an estimate from the text
// bytes of text that passed (billing.TokensFromBytes) and the prompt counted by the tokenizer.
func (c *Processor) SettleFromLog(m MeterReport) {
	if u := m.usage(); u != nil {
		c.meter.usage = u
	} else {
		est := c.estimate(m)
		c.meter.estimate = &est
	}
	c.settle()
}

// CheckpointFromLog records a fast-lane stream's progress from a periodic entry of its answer
// log (ir.MeterReportEvery), as the chunk lane's checkpoint does from its chunks: what a
// restart bills if the stream is cut with the gateway, and its tokens charged to its key's
// rates as it goes.
func (c *Processor) CheckpointFromLog(m MeterReport) {
	c.progress = &m
	progress := func() ir.Usage {
		if p := m.usage(); p != nil {
			return usageBill(p)
		}
		return c.estimate(m)
	}
	c.rateProgress(progress)
	if !c.hold.Due() {
		return
	}
	u := storable(progress())
	c.hold.Progress(c.metered(u, c.plan.model.Pricing.Cost(u), true))
}

// Progress is what the latest periodic entry of the stream's answer log said (false: none
// came yet): what a stream whose last entry never comes (its Envoy died) is known to have sent.
func (c *Processor) Progress() (MeterReport, bool) {
	if c.progress == nil {
		return MeterReport{}, false
	}
	return *c.progress, true
}

// usage is the provider's usage the stream meter read, nil when none came.
func (m MeterReport) usage() *openai.Usage {
	if !m.Usage || (m.PromptTokens == 0 && m.CompletionTokens == 0) {
		return nil
	}
	return &openai.Usage{PromptTokens: m.PromptTokens, CompletionTokens: m.CompletionTokens,
		PromptTokensDetails:     &openai.PromptTokensDetails{CachedTokens: m.CachedTokens},
		CompletionTokensDetails: &openai.CompletionTokensDetails{ImageTokens: m.ImageTokens}}
}

// estimate is the usage of a stream without the provider's: its prompt counted, its
// completion estimated from the bytes of text the meter saw pass.
func (c *Processor) estimate(m MeterReport) ir.Usage {
	return ir.Usage{PromptTokens: c.promptTokens(), CompletionTokens: billing.TokensFromBytes(m.TextBytes)}
}
