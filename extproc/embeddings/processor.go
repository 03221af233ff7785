// Package embeddings is the embeddings request at the gateway (POST /v1/embeddings): the
// router-level processor admits the request through the chat path's key admission (the key,
// its allow-list, the account's credits and the key's monthly limit, one hold), validates it
// (validate.go), plans where it goes (plan.go: a model's or a route's chain, or the provider
// route.provider pins), holds its worst case from the input's tokens and bills the input
// tokens at the model's prompt price when the answer ends (bill.go), naming the catalog model
// in the answer (answer.go). Each attempt is rewritten for its provider by the upstream
// attempt filter with the adapters of extproc/provider/embeddings (chat.EmbedRequest), or here
// for a request of one attempt on a provider that needs no per-attempt filter.
package embeddings

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3filter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/chat"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/xds/ir"
)

// Processor is the processor of one embeddings request.
type Processor struct {
	x    *core.Exchange
	req  *request
	plan *plan
	hold *billing.Hold // taken before forwarding, settled or released exactly once
}

// New is the processor of embeddings request x. A refusal of x releases its hold, or bills it
// when the provider had served it (unanswered).
func New(x *core.Exchange) *Processor {
	p := &Processor{x: x}
	x.OnRefusal = p.unanswered
	return p
}

// unanswered ends the hold of a request whose answer the client does not get: the gateway
// refused it, or its answer was over the gateway's buffer, the client went away while it came
// or the provider cut it. One the provider answered with success was served (and charged for)
// all the same: it is billed once, from the gateway's count of the input (an estimate, as for
// a provider that reports no usage), as chat bills a cut answer. Any other is released
// unbilled.
func (p *Processor) unanswered() {
	if x := p.x; p.hold != nil && x.Responded && x.Status < 400 {
		p.settle(p.countTokens(), true)
		return
	}
	p.release()
}

func (p *Processor) RequestHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x := p.x
	x.StartAdmission(spans.OpEmbeddings)
	if x.Head.Method != http.MethodPost {
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed",
			"%s %s is not supported; use POST", core.Clip(x.Head.Method), core.Clip(x.Head.Path))), nil
	}
	if e := x.Authenticate(x.Head.Auth); e != nil {
		return x.Fail(e), nil
	}
	if e := core.CheckContentType(x.Head.ContentType); e != nil {
		return x.Fail(e), nil
	}
	return x.ReadBody(h), nil
}

func (p *Processor) RequestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	x := p.x
	req, e := parse(b.GetBody())
	if e != nil {
		return x.Fail(e), nil
	}
	pl, e := planFor(x.RT, req)
	if e != nil {
		return x.Fail(e), nil
	}
	if !x.Key.AllowsModels(pl.route, pl.models) {
		return x.Fail(core.Errorf(http.StatusForbidden, "model_not_allowed",
			"this API key may not use %s; use one of its allowed models (GET /v1/models with this key lists them) or another key", pl.target())), nil
	}
	p.req, p.plan = req, pl
	x.Route, x.Model, x.RequestModel = pl.routeID(), pl.model.ID, pl.requested()
	if e := p.admit(); e != nil {
		return x.Fail(e), nil
	}
	x.EndAdmission()
	if x.Observed {
		x.Out.Routed = time.Now()
	}
	if pr := p.directProvider(); pr != nil && x.OwnRoutes {
		return p.handOver(p.direct(b.GetBody(), pr)), nil
	}
	// The body goes on unchanged: each attempt's upstream ext_proc rewrites it for its provider.
	set := []*corev3.HeaderValueOption{
		core.SetHeader(ir.ClusterHeader, pl.cluster),
		core.SetHeader("x-envoy-max-retries", strconv.Itoa(pl.attempts-1)),
	}
	if pl.pinned != "" {
		set = append(set, core.SetHeader(ir.ModelHeader, pl.model.ID))
	}
	return p.handOver(chat.Routed(&extprocv3.HeaderMutation{SetHeaders: set}, nil)), nil
}

// directProvider is the one attempt's provider when it needs no per-attempt filter
// (ir.Provider.DirectChat: OpenAI's API at the client's own path), whose own cluster runs
// none: the request is rewritten here. nil: the attempt filter rewrites it.
func (p *Processor) directProvider() *ir.Provider {
	pl, rt := p.plan, p.x.RT
	if pl.attempts != 1 {
		return nil
	}
	name := pl.pinned
	if ch := rt.Chains[pl.cluster]; name == "" && len(ch) == 1 {
		name = ch[0].Provider
		p.setModel(rt.Models[ch[0].Model])
	}
	if pr := rt.Providers[name]; pr != nil && pr.DirectChat() {
		return pr
	}
	return nil
}

// direct rewrites the request for provider pr here and sends it to pr's own cluster.
func (p *Processor) direct(body []byte, pr *ir.Provider) *extprocv3.ProcessingResponse {
	x := p.x
	up, err := chat.EmbedRequest(body, p.plan.model, pr)
	if err != nil {
		x.Log.Error("direct embeddings rewrite failed", "provider", pr.Name, "error", err)
		return x.Fail(core.Errorf(http.StatusInternalServerError, "internal_error", "the gateway could not rewrite the request for provider %s; retry, and report it if it persists", pr.Name))
	}
	return chat.DirectRoute(x, pr, up)
}

// handOver parks a routed request's exchange for its answer's filter on a split gateway (the
// chunk lane: an embeddings answer is read whole).
func (p *Processor) handOver(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	x := p.x
	if !x.Split || resp.GetRequestBody() == nil {
		return resp
	}
	core.AddMetadata(resp, ir.MetadataNamespace, map[string]*structpb.Value{ir.ExchangeKey: structpb.NewStringValue(x.Park(false))})
	return resp
}

// setModel records the model that runs (a route's later model, the one that answered).
func (p *Processor) setModel(m *core.Model) {
	if m != nil {
		p.plan.model = m
		p.x.Model = m.ID
	}
}

func (p *Processor) ResponseHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x := p.x
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.Key {
		case ":status":
			x.Status, _ = strconv.Atoi(core.HeaderValue(hv))
		case ir.ServedHeader:
			p.served(core.HeaderValue(hv))
		case ir.AttemptsHeader:
			x.ReadAttempts(core.HeaderValue(hv))
		}
	}
	x.Responded = true
	if x.Observed {
		x.Out.Answered = time.Now()
	}
	mut := &extprocv3.HeaderMutation{RemoveHeaders: []string{ir.ServedHeader, ir.AttemptRemovedHeader, ir.AttemptsHeader}}
	if x.Provider != "" && p.plan != nil {
		mut.SetHeaders = []*corev3.HeaderValueOption{
			core.SetHeader(ir.ProviderHeader, x.Provider),
			core.SetHeader(ir.ModelHeader, p.plan.model.ID),
		}
		if up := p.plan.model.UpstreamName(x.Provider); up != "" {
			mut.SetHeaders = append(mut.SetHeaders, core.SetHeader(chat.UpstreamModelHeader, up))
		}
	}
	x.NoteProviderAnswer()
	if x.Status >= 400 {
		p.release()
	}
	// Errors are read to put them in the spec's shape; answers to name the catalog model and
	// to bill their usage.
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: mut},
		}},
		ModeOverride: core.WithResponseBody(extprocv3filter.ProcessingMode_BUFFERED),
	}, nil
}

// served records which attempt answered ("<provider>/<catalog model>"); the model's prices bill it.
func (p *Processor) served(v string) {
	name, mid, ok := strings.Cut(v, "/")
	if !ok || name == "" || p.plan == nil {
		return
	}
	p.x.Provider = name
	p.setModel(p.x.RT.Models[mid])
}

func (p *Processor) ResponseBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	x := p.x
	if x.Status >= 400 {
		return x.ProviderError(b.GetBody(), p.plan != nil), nil
	}
	out, err := p.answer(b.GetBody())
	if err != nil {
		p.release()
		e := core.Errorf(http.StatusBadGateway, "upstream_error", "provider %s %v", x.Provider, err)
		x.Answered(e.Status, e.Code)
		body := e.Body(x.RequestID)
		return bodyResponse(body, core.SetHeader(":status", strconv.Itoa(e.Status))), nil
	}
	x.GiveAnswer()
	return bodyResponse(out), nil
}

// bodyResponse replaces a buffered answer's body with body (and the headers set).
func bodyResponse(body []byte, set ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	set = append(set, core.SetHeader("content-type", "application/json"), core.SetHeader("content-length", strconv.Itoa(len(body))))
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		}},
	}}
}

// Done runs when the ext_proc stream ends: a hold still open means the answer never reached
// the client whole (it is buffered here).
func (p *Processor) Done() { p.unanswered() }
