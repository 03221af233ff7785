package extproc

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollway/tollway/extproc/core"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// This file owns the chat request's processor (POST /v1/chat/completions, and a paid
// endpoint's chat): its headers admitted, its body planned (chat.go), held (admission.go) and
// routed, and its answer shaped, rewritten (answer.go), metered (meter.go) and billed.

// chatProcessor is the processor of a chat request.
type chatProcessor struct{ x *exchange }

func (c chatProcessor) RequestHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x, hd := c.x, &c.x.head
	if hd.method != http.MethodPost {
		return x.fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed",
			"%s %s is not supported; use POST", core.Clip(hd.method), core.Clip(hd.path))), nil
	}
	if e := x.authenticate(hd.auth); e != nil {
		return x.fail(e), nil
	}
	if e := core.CheckContentType(hd.contentType); e != nil {
		return x.fail(e), nil
	}
	return x.readBody(h, hd.contentLength, hd.strip), nil
}

func (c chatProcessor) RequestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	x := c.x
	if len(b.GetBody()) > bigChatBody {
		// Checking tens of megabytes of JSON (an image model's inline images) may outlast
		// Envoy's message timeout on a busy machine: ask for more, once.
		if err := x.envoy.extendTimeout(bigChatTimeout); err != nil {
			return x.fail(errLostEnvoy), nil
		}
	}
	plan, e := planChat(x.rt, b.GetBody())
	if e != nil {
		return x.fail(e), nil
	}
	if !allowsPlan(x.key, plan) {
		if x.endpointRefuses(plan.route, plan.models) {
			return x.fail(x.endpointModels(plan.target())), nil
		}
		return x.fail(core.Errorf(http.StatusForbidden, "model_not_allowed",
			"this API key may not use %s; use one of its allowed models (GET /v1/models with this key lists them) or another key", plan.target())), nil
	}
	x.plan = plan
	if e := x.admit(b.GetBody()); e != nil {
		return x.fail(e), nil
	}
	if x.s.obs != nil {
		x.out.Routed = time.Now()
	}
	if p, m := directTarget(x.rt, plan); p != nil && x.ownRoutes {
		return x.direct(b.GetBody(), p, m), nil
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
	if x.pay != nil {
		set = append(set, core.SetHeader(":path", core.ChatPath)) // routed as the business API it runs
	}
	return routed(&extprocv3.HeaderMutation{SetHeaders: set}, nil), nil
}

// routed lets a request go on to the cluster its header mutation names.
func routed(mut *extprocv3.HeaderMutation, body *extprocv3.BodyMutation) *extprocv3.ProcessingResponse {
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
func (x *exchange) direct(body []byte, p *ir.Provider, m *core.Model) *extprocv3.ProcessingResponse {
	up, _, err := attemptRequest(x.rt, body, m, p)
	if errors.Is(err, provider.ErrBadRequest) {
		return x.fail(core.Errorf(http.StatusBadRequest, "invalid_request", "%v", err))
	}
	if err != nil {
		x.s.log.Error("direct rewrite failed", "provider", p.Name, "error", err)
		return x.fail(core.Errorf(http.StatusInternalServerError, "internal_error", "the gateway could not rewrite the request for provider %s; retry, and report it if it persists", p.Name))
	}
	x.plan.model = m // the model that runs, when the chain's one target is a later model of a route
	// :path is the client's (DirectChat), its query string dropped.
	set, remove := upstreamHeaders(p, up)
	set = append(set, core.SetHeader(ir.ClusterHeader, p.ClusterName()), core.SetHeader("x-envoy-max-retries", "0"))
	// Envoy applies removals after sets: a header the provider gets from the adapter (its
	// credential) is not removed as the client's. x-forwarded-proto stays for the route to
	// remove: Envoy finds no route at all for a request without it.
	for _, hv := range x.headers.GetHeaders().GetHeaders() {
		if _, own := up.Headers[hv.Key]; core.UpstreamDropped(hv.Key) && !own && hv.Key != "x-forwarded-proto" {
			remove = append(remove, hv.Key)
		}
	}
	return routed(&extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
		&extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: up.Body}})
}

func (c chatProcessor) ResponseHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x := c.x
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == ":status" {
			x.status, _ = strconv.Atoi(core.HeaderValue(hv))
			break
		}
	}
	x.responded = true
	if x.s.obs != nil {
		x.out.Answered = time.Now()
	}
	common := &extprocv3.CommonResponse{}
	if x.plan != nil {
		// The attempt that answered says which provider and model it was, and which nested
		// fields its adapter dropped.
		var nested string
		for _, hv := range h.GetHeaders().GetHeaders() {
			switch hv.Key {
			case ir.ServedHeader:
				x.served(core.HeaderValue(hv))
			case ir.AttemptRemovedHeader:
				nested = core.HeaderValue(hv)
			case ir.AttemptsHeader:
				x.readAttempts(core.HeaderValue(hv))
			}
		}
		mut := &extprocv3.HeaderMutation{RemoveHeaders: []string{ir.ServedHeader, ir.AttemptRemovedHeader, ir.AttemptsHeader}}
		if x.provider != "" {
			mut.SetHeaders = []*corev3.HeaderValueOption{
				core.SetHeader(ir.ProviderHeader, x.provider),
				core.SetHeader(ir.ModelHeader, x.plan.model.ID),
			}
			if up := x.plan.model.UpstreamName(x.provider); up != "" {
				mut.SetHeaders = append(mut.SetHeaders, core.SetHeader(UpstreamModelHeader, up))
			}
			if removed := x.removed(nested); len(removed) > 0 {
				mut.SetHeaders = append(mut.SetHeaders, core.SetHeader("x-tollway-removed-params", strings.Join(removed, ",")))
			}
		}
		common.HeaderMutation = mut
		// The answer's provider: a 401 (the chain ended on a refused credential) is recorded at
		// once; any answer below 400 clears an earlier refusal. A 401 Envoy retried elsewhere
		// arrives through the refusal log instead (RefusalLog).
		switch {
		case x.provider == "":
		case x.status == http.StatusUnauthorized:
			x.s.providerRefused(x.provider)
		case x.status < 400:
			x.s.providerAnswered(x.provider)
		}
	}
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: common},
	}}
	// Error bodies are read so they can be put in the spec's shape, and nothing is billed for
	// them. Answers are read to name the catalog model in them and, with billing, to meter
	// them: SSE chunk by chunk as they come (never held back whole), plain JSON buffered.
	switch {
	case x.status >= 400:
		x.release()
		resp.ModeOverride = core.WithResponseBody(extprocv3filter.ProcessingMode_BUFFERED)
	case x.plan == nil:
	default:
		var m *meter
		x.streaming = isEventStream(h)
		if x.hold != nil || x.pay != nil || (x.streaming && x.plan.clientUsage) {
			m = &x.meter // for the bill or the payment, or for a usage chunk the provider may not send
		}
		x.answer = newAnswer(x.plan.model.ID, m, x.plan.stream && !x.plan.clientUsage)
		x.answer.requestID = x.requestID
		if x.streaming && x.plan.clientUsage {
			x.answer.promptTokens = x.promptTokens
		}
		mode := extprocv3filter.ProcessingMode_BUFFERED
		if x.streaming {
			mode = extprocv3filter.ProcessingMode_STREAMED
		}
		resp.ModeOverride = core.WithResponseBody(mode)
		if x.pay != nil {
			if r := x.payOnAnswer(common); r != nil {
				return r, nil
			}
		}
	}
	return resp, nil
}

// removed lists, sorted, what the answering attempt removed from the request: the top-level
// fields its provider does not carry and the nested ones its adapter dropped (nested, from
// the attempt's header). Only an attempt on a provider in another API sets that header (the
// upstream ext_proc does not see OpenAI-shaped answers' headers), so on others a provider's
// own header of that name is ignored.
func (x *exchange) removed(nested string) []string {
	out := x.plan.removedFor(x.plan.model, x.provider)
	if p := x.rt.Providers[x.provider]; nested != "" && p != nil && !p.SpeaksOpenAI() {
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

func isEventStream(h *extprocv3.HttpHeaders) bool {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.Key == "content-type" {
			return strings.HasPrefix(core.HeaderValue(hv), "text/event-stream")
		}
	}
	return false
}

func (c chatProcessor) ResponseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	x := c.x
	if x.status < 400 {
		return x.answerBody(b), nil
	}
	name := "the provider"
	if x.provider != "" {
		name = x.provider
	}
	e := core.UpstreamError(x.status, name, b.GetBody())
	set := []*corev3.HeaderValueOption{}
	code := e.Code // a provider's own code is unbounded: counted as upstream_error
	if x.provider != "" || !gatewayCodes[code] {
		code = "upstream_error"
	}
	if x.status == http.StatusUnauthorized && x.plan != nil {
		// Clients' keys never reach providers: a provider's 401 refuses the gateway's own
		// credential. Passing it on as a 401 would tell the client to change a valid key. (The
		// attempt filter, which sees every attempt's answer, records the refusal.)
		e = core.Errorf(http.StatusBadGateway, "upstream_auth_failed",
			"provider %s refused the gateway's credential for it; the operator must fix its api_key (the request was not served, and your API key is fine)", name)
		set = append(set, core.SetHeader(":status", strconv.Itoa(e.Status)))
		code = e.Code
	}
	if x.pay != nil && e.Status == http.StatusBadRequest {
		// The provider refused a business parameter: a paid endpoint's 422 (docs/x402.md#statuses).
		e = paidRefusal(e)
		set = append(set, core.SetHeader(":status", strconv.Itoa(e.Status)))
	}
	x.answered(e.Status, code)
	body := e.Body(x.requestID)
	set = append(set, core.SetHeader("content-type", "application/json"), core.SetHeader("content-length", strconv.Itoa(len(body))))
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		}},
	}}, nil
}

// answerBody passes a successful answer on, rewritten for the client (see answer): streamed
// chunks as they come, a buffered answer whole; and settles the bill at its end.
func (x *exchange) answerBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	common := &extprocv3.CommonResponse{}
	if x.streaming && x.s.obs != nil && x.out.FirstByte.IsZero() && len(b.GetBody()) > 0 {
		x.out.FirstByte = time.Now()
	}
	if x.answer != nil {
		var out []byte
		var changed bool
		if x.streaming {
			out, changed = x.answer.chunk(b.GetBody(), b.GetEndOfStream())
		} else if out, changed = x.answer.body(b.GetBody()); changed {
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
	if x.streaming && !b.GetEndOfStream() {
		x.checkpoint()
	}
	if b.GetEndOfStream() {
		if x.pay != nil && !x.streaming {
			// A whole answer's upto payment settles now, its header still unsent; a failed
			// settlement withholds the answer.
			if err := x.paidSettle(); err != nil {
				return x.replaceAnswer(common, x.settlementFailed(err))
			}
			if common.HeaderMutation == nil {
				common.HeaderMutation = &extprocv3.HeaderMutation{}
			}
			common.HeaderMutation.SetHeaders = append(common.HeaderMutation.SetHeaders, core.SetHeader(headerPaymentResponse, x.pay.header))
		}
		if x.pay != nil && x.streaming {
			// A stream's payment is recorded now, so that its last message carries the bill to
			// the access log (upto settled before [DONE]; a stream without one settles here,
			// its content already sent whatever the facilitator says).
			_ = x.paidSettle()
		}
		x.settle()
		x.endPaying() // the answer is given: a copy of its credential is a replay from now on
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: common},
	}}
}

// Done: the exchange ends what a chat request holds (exchange.Done).
func (chatProcessor) Done() {}
