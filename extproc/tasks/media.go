package tasks

// Media tasks at the edge (docs/media.md): POST /v1/videos and POST /v1/images create a task,
// GET /v1/{videos,images}/{id} reads it. Both are answered by ext_proc itself: creation and
// queries reach the provider through Envoy's internal listener (envoy.go), never through the
// client's connection, because the provider's task outlives the request. The create is in
// create.go; a task's hold, taken at its create, is billed here when the task ends.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Provider calls made while a client waits must end inside Envoy's ext_proc message timeout
// (5 s), or Envoy fails the request closed. A create extends that timeout once, by
// override_message_timeout (Envoy allows up to ir.MaxExtProcMessageTimeout), to createTimeout
// over all its attempts: providers that answer at once with the finished image (Gemini) take
// tens of seconds. A refresh on GET gets refreshTimeout, after which the stored state is
// answered (the poller keeps refreshing).
const (
	createTimeout  = 150 * time.Second
	refreshTimeout = 3 * time.Second
)

// Endpoints is what the router needs to serve the media endpoints.
type Endpoints struct {
	Service *Service
	// Callbacks decides where a callback_url may point (callbacks.allow_private, the gateway's
	// own listeners).
	Callbacks *Guard
	// Set by the server that serves them (extproc.Server.SetTasks): the books tasks are held
	// against (nil: billing off), the configuration requests run under, and the providers that
	// refuse the gateway's credential.
	Books    *billing.Books
	Runtime  func() *core.Runtime
	Refusals Refusals
	Log      *slog.Logger
	// Spans makes the settlement span of a task the poller bills (nil: tracing off).
	Spans *spans.Tracer

	holds sync.Map // task id -> *billing.Hold, until the task is billed
}

// Refusals are the providers refusing the gateway's credential (extproc's refusals.go).
type Refusals interface {
	// MayTry reports whether a create may send to provider now: yes when it is not refusing;
	// when it is, once in a while (the caller's create is the retry).
	MayTry(provider string, now time.Time) bool
	// Reason says why provider cannot take traffic because of a refusal ("": it is not
	// refusing).
	Reason(provider string) string
}

// Payment is what a paid endpoint's payment (extproc/x402/paid) does at a create's steps; nil
// for a task paid by its key's account.
type Payment interface {
	// Refuses is the 403 of models the endpoint's models list refuses though the caller's key
	// would allow them; nil when the endpoint does not refuse them.
	Refuses(r *ir.Route, models []*core.Model, target string) *core.APIError
	// AdmitTask prices the create at worst and checks its credential; nil: it may run.
	AdmitTask(worst decimal.Decimal) *core.APIError
	// Created settles the payment of task t, whose provider accepted it, and answers with
	// body (its object) or the payment's refusal.
	Created(t *store.Task, worst decimal.Decimal, body []byte) *extprocv3.ProcessingResponse
}

// Media is the processor of the media endpoints: a task created from the body (POST
// /v1/videos, /v1/images) or read (GET .../{id}), answered by ext_proc itself.
type Media struct {
	core.AnsweredEarly
	x    *core.Exchange
	e    *Endpoints // nil: the media endpoints are off
	off  string     // why they are off
	kind string
	pay  Payment
}

// NewMedia is the processor of a request for kind's media endpoints under x, served by e (nil:
// off, for the reason off); pay is its payment (nil: keyed).
func NewMedia(x *core.Exchange, e *Endpoints, off, kind string, pay Payment) *Media {
	return &Media{x: x, e: e, off: off, kind: kind, pay: pay}
}

func (m *Media) RequestHeaders(h *extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	if resp := m.Headers(m.x.Head.Method, m.x.Head.Path); resp != nil {
		return resp, nil
	}
	return m.x.ReadBody(h), nil
}

func (m *Media) RequestBody(b *extprocv3.HttpBody) (*extprocv3.ProcessingResponse, error) {
	return m.create(b.GetBody()), nil
}

// Headers admits method on path (a paid endpoint's request as the media endpoint it sells);
// it returns nil to go on to the body.
func (m *Media) Headers(method, path string) *extprocv3.ProcessingResponse {
	x, kind := m.x, m.kind
	base := core.MediaPaths[kind]
	if method == http.MethodPost {
		x.StartAdmission(spans.OpGenerate) // a create: until the provider is called
	}
	if m.e == nil {
		why := "they are not enabled"
		if m.off != "" {
			why = m.off
		}
		return x.Fail(core.Errorf(http.StatusServiceUnavailable, "media_unavailable", "%s tasks are not available on this gateway: %s", kind, why))
	}
	if x.Key == nil { // a paid endpoint (extproc/x402/paid) has settled who the caller is
		if e := x.Authenticate(x.Head.Auth); e != nil {
			return x.Fail(e)
		}
	}
	if path == base {
		if method != http.MethodPost {
			return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s is not supported; create a%s %s task with POST %s (GET %s/{id} reads one)", core.Clip(method), base, core.Article(kind), kind, base, base))
		}
		contentType := x.Head.ContentType
		if mt, _, err := mime.ParseMediaType(contentType); contentType != "" && (err != nil || (mt != "application/json" && mt != "multipart/form-data")) {
			return x.Fail(core.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type",
				"content-type %s is not supported: send JSON (application/json) or a form (multipart/form-data)", core.Clip(contentType)))
		}
		return nil
	}
	id := strings.TrimPrefix(path, base+"/")
	if method == http.MethodPost {
		// A create sent to a sub-path (the OpenAI SDK's images.generate posts to /images/generations).
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "POST %s is not supported; create a%s %s task with POST %s", core.Clip(path), core.Article(kind), kind, base))
	}
	if method != http.MethodGet || id == "" || strings.Contains(id, "/") {
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s is not supported; read a%s %s task with GET %s/{id} (POST %s creates one)", core.Clip(method), core.Clip(path), core.Article(kind), kind, base, base))
	}
	return m.read(id)
}

// read answers GET .../{id} from the task store, refreshed from the provider if it can be in
// time.
func (m *Media) read(id string) *extprocv3.ProcessingResponse {
	x, kind := m.x, m.kind
	ctx, cancel := context.WithTimeout(x.Context(), refreshTimeout)
	defer cancel()
	t, err := m.e.Service.Get(ctx, x.Key.Account, id)
	if err == nil && t.Kind != kind {
		err = &Error{Kind: KindNotFound, Code: "not_found", Message: "no " + kind + " task " + core.Clip(id) + "; it is a " + t.Kind + " task: GET " + core.MediaPaths[t.Kind] + "/" + core.Clip(id)}
	}
	if err != nil {
		return x.Fail(apiError(err))
	}
	x.TaskModel, x.Provider = t.Model, t.Provider
	body, _ := json.Marshal(ObjectOf(t, time.Now()))
	return x.Reply(http.StatusOK, body)
}

// apiError maps the task service's failures to the spec's errors, at the boundary.
func apiError(err error) *core.APIError {
	var te *Error
	if !errors.As(err, &te) {
		return core.Errorf(http.StatusInternalServerError, "internal_error", "the task failed inside the gateway; retry")
	}
	status := map[Kind]int{KindBadRequest: 400, KindNotFound: 404, KindUnavailable: 503, KindInternal: 500}[te.Kind]
	return core.Errorf(status, te.Code, "%s", te.Message)
}

// Price is what a finished task costs. Completed: the request price, the duration price
// for every second produced, the image price for every image, and the token prices for the
// tokens the provider reports (I3; its images' tokens priced per image where the model has an
// image price, see ir.Pricing.Cost), at the tier of its prompt tokens. Failed: only the tokens
// the provider reports it used anyway (Gemini bills a prompt that produced no image), never
// those of an image the client did not get.
func (e *Endpoints) Price(t *store.Task) decimal.Decimal {
	m := e.Runtime().Models[t.Model]
	if m == nil {
		return decimal.Zero
	}
	u := ir.Usage{PromptTokens: t.PromptTokens, CompletionTokens: t.CompletionTokens, ImageTokens: t.ImageTokens}
	if t.Status != string(task.Completed) {
		tier := m.Pricing.TierFor(u.PromptTokens)
		completion := u.CompletionTokens - min(max(u.ImageTokens, 0), u.CompletionTokens)
		return tier.Prompt.Mul(decimal.NewFromInt(u.PromptTokens)).Add(tier.Completion.Mul(decimal.NewFromInt(completion)))
	}
	u.Images = Images(t)
	return m.Pricing.TaskCost(u, Seconds(t))
}

// Bill settles the hold of a task that ended, once: a completed one at t.Cost (whose usage
// record the store settled with the completion), a failed one released.
func (e *Endpoints) Bill(t *store.Task) {
	b := e.Books
	if b == nil || t.Paid { // a paid task was settled through x402 when it was created
		return
	}
	var hold *billing.Hold
	if v, ok := e.holds.LoadAndDelete(t.ID); ok {
		hold = v.(*billing.Hold)
	} else if hold, _ = b.Reserve(billing.Owner{Account: t.Account, KeyID: t.KeyID}, decimal.Zero); hold == nil {
		e.Log.Error("TASK NOT BILLED: its account is gone", "task", t.ID, "account", t.Account)
		return
	}
	if !t.Settled {
		hold.Release()
		return
	}
	hold.Charge(t.Cost)
}

// BillLater is Bill for a task the poller found ended, after its create's request: under a
// settlement span in the create's trace, when it was traced (store.Task.Trace).
func (e *Endpoints) BillLater(t *store.Task) {
	if t.Paid || e.Books == nil { // nothing is billed here
		e.Bill(t)
		return
	}
	span := e.Spans.Start(spans.FromTraceparent(t.Trace), spans.Settlement)
	e.Bill(t)
	if span.Recording() {
		span.Set(spans.OperationKey.String(spans.OpGenerate), spans.RequestIDKey.String(t.RequestID))
		if t.Route != "" {
			span.Set(spans.RouteKey.String(t.Route))
		}
		taskSettled(span, t)
	}
	span.End()
}

// taskSettled sets a task's settlement span's attributes: who ran it and what it cost.
func taskSettled(span spans.Span, t *store.Task) {
	span.Set(spans.Provider(t.Provider)...)
	span.Set(spans.ResponseModelKey.String(t.Model), spans.InputTokensKey.Int64(t.PromptTokens),
		spans.OutputTokensKey.Int64(t.CompletionTokens), spans.Cost(t.Cost))
}

// RestoreHolds holds again, after a start, what running tasks held before: their credits
// stay reserved until they are billed. A hold the balance no longer covers is kept at zero (the
// task is still billed when it completes).
func (e *Endpoints) RestoreHolds(st store.Tasks) (int, error) {
	b := e.Books
	if b == nil {
		return 0, nil
	}
	n, after := 0, ""
	for {
		open, err := st.OpenTasks(500, after)
		if err != nil {
			return n, err
		}
		for _, t := range open {
			after = t.ID
			o := billing.Owner{Account: t.Account, KeyID: t.KeyID}
			h, err := b.Reserve(o, t.Hold)
			if err != nil {
				h, _ = b.Reserve(o, decimal.Zero)
			}
			if h != nil {
				e.holds.Store(t.ID, h)
				n++
			}
		}
		if len(open) < 500 {
			return n, nil
		}
	}
}
