// Package chat is the chat completions request (POST /v1/chat/completions, and a paid
// endpoint's chat) at the gateway: the router-level processor (processor.go) plans the request
// (validation in validate.go, validate_messages.go, walker.go), holds its worst case (hold.go,
// through extproc/billing's Books), routes it, rewrites its answer for the client and meters it
// (answer.go) to settle the bill; a paid request's payment is reached through Payment
// (payment.go). The upstream attempt filter's processor (attempt.go) rewrites each attempt for
// its provider (AttemptRequest, through the adapter of extproc/provider/chat the runtime chose
// for that provider, core.Model.Adapters) and translates the answer back. It stands on
// extproc/core and imports nothing of extproc itself.
package chat

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/xds/ir"
)

// Processor is the processor of a chat request: its headers admitted, its body planned
// (chatPlan, validate*.go), held (hold.go) and routed, and its answer shaped, rewritten and
// metered (answer.go) and billed.
type Processor struct {
	x   *core.Exchange
	pay Payment // nil: a keyed request

	plan *chatPlan
	// money: the hold taken before forwarding, released or settled exactly once
	hold           *billing.Hold
	promptEstimate int64  // strict bound of the prompt's tokens, sized the hold
	body           []byte // the request, kept (when small) to count its prompt if a bill is estimated
	promptCount    int64  // the prompt counted by the tokenizer, once promptCounted
	promptCounted  bool
	paidHold       decimal.Decimal // a paid request's worst case, priced at admission: no payment exceeds it
	meter          meter
	answer         *answer // rewrites a successful answer for the client
	streaming      bool
	// fast: on a split gateway, the answer takes the fast lane (lane.go); byLog: it is a
	// stream metered in Envoy, billed when its answer log entry arrives (SettleFromLog).
	fast, byLog bool
	// progress is what the latest periodic entry of a fast-lane stream's answer log said the
	// stream meter read (nil before one came): the bill if the stream's last entry never comes.
	progress *MeterReport
	// rateProgressed is when a stream's tokens were last charged to its rates (rateProgress).
	rateProgressed time.Time
}

// New is the processor of chat request x, paid by pay (nil: by its key). A refusal of x
// releases its hold.
func New(x *core.Exchange, pay Payment) *Processor {
	c := &Processor{x: x, pay: pay}
	x.OnRefusal = c.release
	return c
}

// A chat body over bigChatBody gets bigChatTimeout from Envoy to be checked in, instead of
// its 5 s message timeout.
const (
	bigChatBody    = 1 << 20
	bigChatTimeout = 30 * time.Second
)

func (c *Processor) RequestHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x, hd := c.x, &c.x.Head
	x.StartAdmission(spans.OpChat)
	if hd.Method != http.MethodPost {
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed",
			"%s %s is not supported; use POST", core.Clip(hd.Method), core.Clip(hd.Path))), nil
	}
	if x.Key == nil { // a paid endpoint's wrapper has settled who the caller is
		if e := x.Authenticate(hd.Auth); e != nil {
			return x.Fail(e), nil
		}
	}
	if e := core.CheckContentType(hd.ContentType); e != nil {
		return x.Fail(e), nil
	}
	return x.ReadBody(h), nil
}

// setPlan makes plan the request's, with the model it runs: the access log and the observer
// read them.
func (c *Processor) setPlan(plan *chatPlan) {
	c.plan = plan
	c.x.RequestModel = plan.model.ID
	if plan.route != nil {
		c.x.RequestModel = plan.route.ID
	}
	c.x.Route, c.x.Stream = plan.routeID(), plan.stream
	c.setModel(plan.model)
}

// setModel records the model that runs (a route's later model, the one that answered).
func (c *Processor) setModel(m *core.Model) {
	c.plan.model = m
	c.x.Model = m.ID
}

// served records which attempt answered ("<provider>/<catalog model>"); the model's prices bill it.
func (c *Processor) served(v string) {
	p, mid, ok := strings.Cut(v, "/")
	if !ok || p == "" {
		return
	}
	c.x.Provider = p
	if m := c.x.RT.Models[mid]; m != nil {
		c.setModel(m)
	}
}

func (c *Processor) RequestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	x := c.x
	if len(b.GetBody()) > bigChatBody {
		// Checking tens of megabytes of JSON (an image model's inline images) may outlast
		// Envoy's message timeout on a busy machine: ask for more, once.
		if err := x.Envoy.ExtendTimeout(bigChatTimeout); err != nil {
			return x.Fail(core.ErrLostEnvoy), nil
		}
	}
	plan, e := planChat(x.RT, b.GetBody())
	if e != nil {
		return x.Fail(e), nil
	}
	if !allowsPlan(x.Key, plan) {
		if c.pay != nil {
			if e := c.pay.Refuses(plan.route, plan.models, plan.target()); e != nil {
				return x.Fail(e), nil
			}
		}
		return x.Fail(core.Errorf(http.StatusForbidden, "model_not_allowed",
			"this API key may not use %s; use one of its allowed models (GET /v1/models with this key lists them) or another key", plan.target())), nil
	}
	c.setPlan(plan)
	if e := c.admit(b.GetBody()); e != nil {
		return x.Fail(e), nil
	}
	x.EndAdmission()
	if x.Observed {
		x.Out.Routed = time.Now()
	}
	if p, m := directTarget(x.RT, plan); p != nil && x.OwnRoutes {
		return c.routed(c.direct(b.GetBody(), p, m)), nil
	}
	// The body goes on unchanged: each attempt's upstream ext_proc rewrites it for its provider.
	set := []*corev3.HeaderValueOption{
		core.SetHeader(ir.ClusterHeader, plan.cluster),
		// Envoy retries down the chain at most once per remaining attempt.
		core.SetHeader("x-envoy-max-retries", strconv.Itoa(plan.attempts-1)),
	}
	if plan.pinned != "" {
		set = append(set, core.SetHeader(ir.ModelHeader, plan.model.ID))
	}
	if c.pay != nil {
		set = append(set, core.SetHeader(":path", core.ChatPath)) // routed as the business API it runs
	}
	return c.routed(Routed(&extprocv3.HeaderMutation{SetHeaders: set}, nil)), nil
}

// Planning: where a chat request goes (a model's chain, a route's, or the provider
// route.provider pins), decided from its validated body before any hold.

// chatPlan is the router-level decision for one chat request: which chain of attempts Envoy
// walks. The body is rewritten per attempt by the upstream ext_proc (see attempt).
type chatPlan struct {
	model    *core.Model // the catalog model asked for (for a route: the first of its chain)
	route    *ir.Route
	models   []*core.Model // every model the chain may use, for the worst-case hold
	cluster  string        // the Envoy cluster: a chain, or a provider for a pinned request
	attempts int           // how many attempts the chain has
	pinned   string        // provider name when route.provider pins the request

	fields      []string // the request's top-level fields, to say which were removed
	stream      bool
	clientUsage bool  // the client asked for stream usage itself
	maxTokens   int64 // the client's output cap (max_completion_tokens or max_tokens); 0 if none
	answers     int64 // n: how many answers the client asked for, each up to the output cap
	promptBound int64 // a strict bound of the prompt's tokens, read with the request
}

// target names what the request asked for, for messages.
func (p *chatPlan) target() string {
	if p.route != nil {
		return "route " + p.route.ID
	}
	return "model " + strconv.Quote(p.model.ID)
}

func (p *chatPlan) routeID() string {
	if p.route == nil {
		return ""
	}
	return p.route.ID
}

// removedFor lists the request's fields that provider does not accept for m: what the attempt
// on that provider removed.
func (p *chatPlan) removedFor(m *core.Model, provider string) []string {
	return m.Unsupported(provider, p.fields)
}

// Check is the refusal of a chat request body as the router-level filter validates it (nil:
// it is valid), before any catalog lookup.
func Check(body []byte) *core.APIError {
	_, e := parseChat(body)
	return e
}

// planChat validates a chat request body and decides where it goes.
func planChat(rt *core.Runtime, body []byte) (*chatPlan, *core.APIError) {
	req, e := parseChat(body)
	if e != nil {
		return nil, e
	}
	plan := &chatPlan{
		fields: req.fields, stream: req.stream, clientUsage: req.stream && req.includeUsage,
		maxTokens: req.maxTokens, answers: req.n, promptBound: req.promptBound,
	}
	modelID, mode, pin := req.model, req.routeMode, req.routeProvider
	if strings.HasPrefix(modelID, ir.RoutePrefix) {
		// The route chooses models and providers itself: route.provider is ignored.
		if e := planRoute(rt, plan, modelID, mode); e != nil {
			return plan, e
		}
		return plan, plan.mediaRules()
	}
	m, ok := rt.Models[modelID]
	if !ok {
		return nil, core.Errorf(http.StatusBadRequest, "model_not_found",
			"model %q is not in the catalog; GET /v1/models lists the model ids you can use", core.Clip(modelID))
	}
	plan.model, plan.models = m, []*core.Model{m}
	if e := plan.mediaRules(); e != nil {
		return nil, e
	}
	if pin != "" {
		return plan, planPinned(rt, plan, pin)
	}
	ch := rt.Chains[ir.ModelChainCluster(m.ID)]
	if len(ch) == 0 {
		return nil, rt.Unavailable(m, core.NoRefusal)
	}
	plan.cluster, plan.attempts = ir.ModelChainCluster(m.ID), len(ch)
	return plan, nil
}

// mediaRules refuses, before any hold, what the plan's media models cannot do here: a video
// model, or an image model of another family, has its own endpoint; an I3 answer carries its
// images whole, so it is not streamed (a stream would only hold them back to its end).
func (p *chatPlan) mediaRules() *core.APIError {
	for _, m := range p.models {
		f, media := ir.MediaFamilies[m.Family]
		switch {
		case m.Kind() == ir.KindEmbeddings:
			return core.Errorf(http.StatusBadRequest, "model_not_found",
				"model %q is an embeddings model, not a chat model: send it to POST %s", m.ID, core.EmbeddingsPath)
		case !media:
		case m.Family != ir.ChatImageFamily:
			return core.Errorf(http.StatusBadRequest, "model_not_found",
				"model %q is a%s %s model, not a chat model: create its tasks with POST %s", m.ID, core.Article(f.Kind), f.Kind, core.MediaPaths[f.Kind])
		case p.stream:
			return core.Errorf(http.StatusBadRequest, "invalid_request",
				"stream is not supported for image model %q: its answer carries whole images; send stream false (or leave it out)", m.ID)
		}
	}
	return nil
}

func planRoute(rt *core.Runtime, plan *chatPlan, id, mode string) *core.APIError {
	r, ids, e := rt.RouteModels(id, mode)
	if e != nil {
		return e
	}
	plan.route = r
	for _, mid := range ids {
		plan.models = append(plan.models, rt.Models[mid])
	}
	plan.model = plan.models[0]
	if r.Rule == ir.RuleModeMapping {
		ch := rt.Chains[ir.ModelChainCluster(plan.model.ID)]
		if len(ch) == 0 {
			return rt.Unavailable(plan.model, core.NoRefusal)
		}
		plan.cluster, plan.attempts = ir.ModelChainCluster(plan.model.ID), len(ch)
		return nil
	}
	ch := rt.Chains[ir.RouteChainCluster(r)]
	if len(ch) == 0 {
		return core.Errorf(http.StatusServiceUnavailable, "route_unavailable",
			"no model of route %s has a provider that can take traffic; check their providers' credentials", id)
	}
	plan.cluster, plan.attempts = ir.RouteChainCluster(r), len(ch)
	return nil
}

func planPinned(rt *core.Runtime, plan *chatPlan, pin string) *core.APIError {
	m := plan.model
	for _, t := range m.Targets {
		if t.Provider != pin {
			continue
		}
		if p := rt.Providers[pin]; p == nil || !p.Ready() {
			return core.Errorf(http.StatusServiceUnavailable, "provider_not_available",
				"provider %q has no API key configured; remove route.provider or choose another provider", pin)
		}
		plan.pinned, plan.cluster, plan.attempts = pin, ir.ClusterPrefix+pin, 1
		return nil
	}
	names := make([]string, len(m.Targets))
	for i, t := range m.Targets {
		names[i] = t.Provider
	}
	return core.Errorf(http.StatusBadRequest, "provider_not_available",
		"provider %q does not serve model %q (it is served by %s): remove route.provider or choose one of those",
		core.Clip(pin), m.ID, strings.Join(names, ", "))
}

// allowsPlan: a route is allowed when the key lists the route itself or every model it may use.
func allowsPlan(k *core.KeyInfo, p *chatPlan) bool { return k.AllowsModels(p.route, p.models) }

// routed hands a routed request's answer over to its answer filter on a split gateway.
func (c *Processor) routed(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	if !c.x.Split || resp.GetRequestBody() == nil {
		return resp // not split, or refused (direct's rewrite failed)
	}
	return c.handOver(resp)
}

// Routed lets a request go on to the cluster its header mutation names.
func Routed(mut *extprocv3.HeaderMutation, body *extprocv3.BodyMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: mut,
			BodyMutation:   body,
			// The cluster header picks the cluster, so the route chosen before it was set is void.
			ClearRouteCache: true,
		}},
	}}
}

// directTarget is the one attempt of a plan when its provider is rewritten for here
// (ir.Provider.DirectChat): a chain of one, or a request pinned to the provider.
func directTarget(rt *core.Runtime, plan *chatPlan) (*ir.Provider, *core.Model) {
	if plan.attempts != 1 {
		return nil, nil
	}
	var p *ir.Provider
	m := plan.model
	if plan.pinned != "" {
		p = rt.Providers[plan.pinned]
	} else if ch := rt.Chains[plan.cluster]; len(ch) == 1 {
		p, m = rt.Providers[ch[0].Provider], rt.Models[ch[0].Model]
	}
	if p == nil || m == nil || !p.DirectChat() {
		return nil, nil
	}
	return p, m
}

// direct rewrites a request of one attempt for its provider here, as the per-attempt filter
// would (attempt.requestBody), and sends it to the provider's own cluster, which runs no
// per-attempt filter: one ext_proc stream per request instead of two. Envoy makes no retry
// (x-envoy-max-retries 0, as for any chain of one).
func (c *Processor) direct(body []byte, p *ir.Provider, m *core.Model) *extprocv3.ProcessingResponse {
	x := c.x
	up, _, err := AttemptRequest(x.RT, body, m, p)
	if errors.Is(err, provider.ErrBadRequest) {
		return x.Fail(core.Errorf(http.StatusBadRequest, "invalid_request", "%v", err))
	}
	if err != nil {
		x.Log.Error("direct rewrite failed", "provider", p.Name, "error", err)
		return x.Fail(core.Errorf(http.StatusInternalServerError, "internal_error", "the gateway could not rewrite the request for provider %s; retry, and report it if it persists", p.Name))
	}
	c.setModel(m) // the model that runs, when the chain's one target is a later model of a route
	return DirectRoute(x, p, up)
}

// DirectRoute sends request x, rewritten here as up for provider p, to the provider's own
// cluster, which runs no per-attempt filter. :path is the client's (DirectChat), its query
// string dropped.
func DirectRoute(x *core.Exchange, p *ir.Provider, up *provider.Upstream) *extprocv3.ProcessingResponse {
	set, remove := UpstreamHeaders(p, up)
	set = append(set, core.SetHeader(ir.ClusterHeader, p.ClusterName()), core.SetHeader("x-envoy-max-retries", "0"))
	// Envoy applies removals after sets: a header the provider gets from the adapter (its
	// credential) is not removed as the client's. x-forwarded-proto stays for the route to
	// remove: Envoy finds no route at all for a request without it.
	for _, hv := range x.Headers.GetHeaders().GetHeaders() {
		if _, own := up.Headers[hv.Key]; core.UpstreamDropped(hv.Key) && !own && hv.Key != "x-forwarded-proto" {
			remove = append(remove, hv.Key)
		}
	}
	return Routed(&extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
		&extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: up.Body}})
}

func (c *Processor) ResponseHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x := c.x
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == ":status" {
			x.Status, _ = strconv.Atoi(core.HeaderValue(hv))
			break
		}
	}
	x.Responded = true
	if x.Observed {
		x.Out.Answered = time.Now()
	}
	common := &extprocv3.CommonResponse{}
	if c.plan != nil {
		// The attempt that answered says which provider and model it was, and which nested
		// fields its adapter dropped.
		var nested string
		for _, hv := range h.GetHeaders().GetHeaders() {
			switch hv.Key {
			case ir.ServedHeader:
				c.served(core.HeaderValue(hv))
			case ir.AttemptRemovedHeader:
				nested = core.HeaderValue(hv)
			case ir.AttemptsHeader:
				x.ReadAttempts(core.HeaderValue(hv))
			}
		}
		mut := &extprocv3.HeaderMutation{RemoveHeaders: []string{ir.ServedHeader, ir.AttemptRemovedHeader, ir.AttemptsHeader}}
		if x.Provider != "" {
			mut.SetHeaders = []*corev3.HeaderValueOption{
				core.SetHeader(ir.ProviderHeader, x.Provider),
				core.SetHeader(ir.ModelHeader, c.plan.model.ID),
			}
			if up := c.plan.model.UpstreamName(x.Provider); up != "" {
				mut.SetHeaders = append(mut.SetHeaders, core.SetHeader(UpstreamModelHeader, up))
			}
			if removed := c.removed(nested); len(removed) > 0 {
				mut.SetHeaders = append(mut.SetHeaders, core.SetHeader("x-tollway-removed-params", strings.Join(removed, ",")))
			}
		}
		common.HeaderMutation = mut
		x.NoteProviderAnswer()
	}
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: common},
	}}
	// Error bodies are read so they can be put in the spec's shape, and nothing is billed for
	// them. Answers are read to name the catalog model in them and, with billing, to meter
	// them: SSE chunk by chunk as they come (never held back whole), plain JSON buffered.
	switch {
	case x.Status >= 400:
		c.release()
		resp.ModeOverride = core.WithResponseBody(extprocv3filter.ProcessingMode_BUFFERED)
	case c.plan == nil:
	case c.fast && IsEventStream(h):
		c.streaming = true
		c.fastAnswer(resp) // no mode override: the chunks pass Envoy's stream meter only
	case c.fast:
		// Not the stream the fast lane expected (a provider answering JSON): its body is read
		// whole, as the chunk lane would (this filter takes mode overrides).
		c.fast = false
		fallthrough
	default:
		var m *meter
		c.streaming = IsEventStream(h)
		if c.hold != nil || c.pay != nil || (c.streaming && c.plan.clientUsage) || x.RateCountsTokens() {
			m = &c.meter // for the bill, the payment or the tokens rate, or for a usage chunk the provider may not send
		}
		c.answer = newAnswer(c.plan.model.ID, m, c.plan.stream && !c.plan.clientUsage)
		c.answer.requestID = x.RequestID
		x.Rewriting = true
		if c.streaming && c.plan.clientUsage {
			c.answer.promptTokens = c.promptTokens
		}
		mode := extprocv3filter.ProcessingMode_BUFFERED
		if c.streaming {
			mode = extprocv3filter.ProcessingMode_STREAMED
		}
		resp.ModeOverride = core.WithResponseBody(mode)
		if c.pay != nil {
			if r := c.payOnAnswer(common); r != nil {
				return r, nil
			}
		}
	}
	return resp, nil
}

// payOnAnswer runs when a paid request's business answer begins (status < 400): an exact
// payment settles now, its PAYMENT-RESPONSE on the answer's headers (a failed settlement
// answers instead); upto settles at the end, a stream's just before its [DONE].
func (c *Processor) payOnAnswer(common *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	header, beforeDone, e := c.pay.Answer(c.streaming)
	if e != nil {
		return c.x.Fail(e)
	}
	if header != "" {
		if common.HeaderMutation == nil {
			common.HeaderMutation = &extprocv3.HeaderMutation{}
		}
		common.HeaderMutation.SetHeaders = append(common.HeaderMutation.SetHeaders, core.SetHeader(HeaderPaymentResponse, header))
	}
	c.answer.beforeDone = beforeDone
	return nil
}

// removed lists, sorted, what the answering attempt removed from the request: the top-level
// fields its provider does not carry and the nested ones its adapter dropped (nested, from
// the attempt's header). Only an attempt on a provider in another API sets that header (the
// upstream ext_proc does not see OpenAI-shaped answers' headers), so on others a provider's
// own header of that name is ignored.
func (c *Processor) removed(nested string) []string {
	out := c.plan.removedFor(c.plan.model, c.x.Provider)
	if p := c.x.RT.Providers[c.x.Provider]; nested != "" && p != nil && !p.SpeaksOpenAI() {
		for _, f := range strings.Split(nested, ",") {
			if f != "" && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
		slices.Sort(out)
	}
	return out
}

// UpstreamModelHeader names, on an answer, the provider's own name of the model that answered
// (the body's model field names the catalog model).
const UpstreamModelHeader = "x-tollway-upstream-model"

// IsEventStream reports whether an answer's headers say it is an event stream (SSE).
func IsEventStream(h *extprocv3.HttpHeaders) bool {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == "content-type" {
			return strings.HasPrefix(core.HeaderValue(hv), "text/event-stream")
		}
	}
	return false
}

func (c *Processor) ResponseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	if c.x.Status < 400 {
		return c.answerBody(b), nil
	}
	return c.x.ProviderError(b.GetBody(), c.plan != nil), nil
}

// answerBody passes a successful answer on, rewritten for the client (see answer): streamed
// chunks as they come, a buffered answer whole; and settles the bill at its end.
func (c *Processor) answerBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	x := c.x
	common := &extprocv3.CommonResponse{}
	if c.streaming && x.Observed && x.Out.FirstByte.IsZero() && len(b.GetBody()) > 0 {
		x.Out.FirstByte = time.Now()
	}
	if c.answer != nil {
		var out []byte
		var changed bool
		if c.streaming {
			out, changed = c.answer.chunk(b.GetBody(), b.GetEndOfStream())
		} else if out, changed = c.answer.body(b.GetBody()); changed {
			common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				core.SetHeader("content-length", strconv.Itoa(len(out))),
			}}
		}
		switch {
		case !changed:
		case len(out) == 0:
			common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
		default:
			common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
		}
	}
	if c.streaming && !b.GetEndOfStream() {
		c.checkpoint()
	}
	if b.GetEndOfStream() {
		if c.pay != nil && !c.streaming {
			// A whole answer's upto payment settles now, its header still unsent; a failed
			// settlement withholds the answer.
			header, err := c.pay.Settle()
			if err != nil {
				return c.replaceAnswer(common, c.pay.Failed(err))
			}
			if common.HeaderMutation == nil {
				common.HeaderMutation = &extprocv3.HeaderMutation{}
			}
			common.HeaderMutation.SetHeaders = append(common.HeaderMutation.SetHeaders, core.SetHeader(HeaderPaymentResponse, header))
		}
		if c.pay != nil && c.streaming {
			// A stream's payment is recorded now, so that its last message carries the bill to
			// the access log (upto settled before [DONE]; a stream without one settles here,
			// its content already sent whatever the facilitator says).
			_, _ = c.pay.Settle()
		}
		c.settle()
		x.GiveAnswer() // the answer is given: a copy of its credential is a replay from now on
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: common},
	}}
}

// replaceAnswer turns a buffered answer, whose headers are still held, into e.
func (c *Processor) replaceAnswer(common *extprocv3.CommonResponse, e *core.APIError) *extprocv3.ProcessingResponse {
	c.x.Answered(e.Status, e.Code)
	body := e.Body(c.x.RequestID)
	m := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
		core.SetHeader(":status", strconv.Itoa(e.Status)), core.SetHeader("content-type", "application/json"),
		core.SetHeader("content-length", strconv.Itoa(len(body))),
	}}
	core.AddHeaders(m, e.Headers)
	common.HeaderMutation = m
	common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: common},
	}}
}

// Done runs when the ext_proc stream ends (and when the silence watchdog ends the answer). A
// hold still open means the exchange ended early: if the provider had answered (a stream cut,
// a client gone mid-answer) the request is billed from what was sent, a paid one settled for
// it; if not, nothing was delivered and the hold is released. Calling it again does nothing.
func (c *Processor) Done() {
	if c.x.Responded && c.x.Status < 400 {
		if c.pay != nil {
			_, _ = c.pay.Settle() // a paid stream cut before its end settles what was sent
		}
		c.settle()
		return
	}
	c.release()
}
