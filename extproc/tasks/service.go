package tasks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/xds/ir"
)

// Catalog is what the service needs of the current configuration.
type Catalog interface {
	Provider(name string) *ir.Provider
	Model(id string) *ir.Model
}

// Service runs tasks: creation with fallback, refresh through Envoy, and the bill at the end.
type Service struct {
	Store   store.Tasks
	Envoy   *Envoy
	Log     *slog.Logger
	Now     func() time.Time
	Catalog func() Catalog
	// Adapters finds a media family's task adapter (nil: task.For); tests stand in their own.
	Adapters func(family string) (task.Adapter, error)
	// Price is what a finished task costs (nil: nothing is priced or billed): a completed one
	// what it produced, a failed one what its provider billed anyway (I3: its tokens), if any.
	Price func(t *store.Task) decimal.Decimal
	// ImageLife is how long images a provider sent inline (not as URLs) are kept (default 24 h).
	ImageLife time.Duration
	// Charge debits a completed task's cost from its account: its usage record is settled in
	// the transaction that stores the completion, so a crash can neither lose nor repeat it.
	// Off (billing disabled), the cost is shown and nothing is debited.
	Charge bool
	// Bill tells the in-memory ledger that a task ended, after the store committed it:
	// completed with t.Cost set (its hold settled at that cost), or failed (its hold released).
	Bill func(t *store.Task)
	// RefreshEvery is the least time between two provider queries of one task.
	RefreshEvery time.Duration
	// MaxAge is how long after its creation a task may stay unfinished before it fails with
	// task_timeout (tasks.max_age; 0: DefaultMaxAge).
	MaxAge time.Duration
	// UnknownGrace is how long a provider must keep saying it does not know a task (at least
	// UnknownConfirmations answers in a row) before the task fails with task_expired_or_unknown
	// (tasks.unknown_grace; 0: DefaultUnknownGrace).
	UnknownGrace time.Duration
	// Refused and Answered, when set, hear of each provider that refused the gateway's
	// credential on a task call, and of each that accepted it (a task created or answered for).
	Refused, Answered func(provider string)
	// Owner is this replica's name: it leases the running tasks it polls, so each task is
	// polled by one replica at a time (store.TaskLeases; "" : "local"). Lease is how long a
	// lease lasts unrenewed, the longest a task waits for another replica to take it over when
	// its poller dies (0: DefaultLease).
	Owner string
	Lease time.Duration
	// Changed, when set, hears of each status a task takes, after the store committed it
	// (metrics): from is "" for a task just created; usage is the record its end settled, if any.
	Changed func(t *store.Task, from string, usage *store.UsageRecord)

	refreshing sync.Map // task id -> struct{}: one refresh of a task at a time
	sched      schedule
	queries    atomic.Int64
}

// Kind of failure, mapped to an HTTP status at the boundary (extproc).
type Kind int

const (
	KindBadRequest  Kind = iota + 1 // the client's request: 400
	KindNotFound                    // no such task for this account: 404
	KindUnavailable                 // no provider took the task: 503
	KindInternal                    // the store failed: 500
)

// Error is a failure of the service with what the client should know.
type Error struct {
	Kind    Kind
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Attempt is one provider that may create the task, in fallback order.
type Attempt struct {
	Provider *ir.Provider
	Model    string // the provider's model name
	// Spec and Request are the catalog model this attempt runs and the request as its family
	// read it; nil: NewTask's (a route falls back across models, each with its own).
	Spec    *ir.Model
	Request *task.Validated
}

// NewTask is a validated create request.
type NewTask struct {
	Kind, Account, KeyID, RequestID, Route string
	Model                                  *ir.Model
	Attempts                               []Attempt
	Body                                   provider.Request
	Request                                task.Validated
	Hold                                   decimal.Decimal
	Paid                                   bool   // paid through x402: never charged to credits
	Trace                                  string // the create's traceparent (spans.Traceparent)
}

// Create creates the task at the first provider that accepts it and records it durably
// before the client sees its id. A provider that fails before accepting (unreachable, 5xx,
// 429, a refused credential) passes the task to the next; a refusal of the request itself
// (invalid parameters, content policy) is the client's answer.
//
// ctx is the client's request. Once it is cancelled (the client went away) no provider is
// asked any more; a create already sent is deliberately not cut (only ctx's deadline bounds
// it): the provider may have accepted it, and a task it runs and bills must be recorded.
func (s *Service) Create(ctx context.Context, in NewTask) (*store.Task, error) {
	var reasons []string
	for _, a := range in.Attempts {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, &Error{Kind: KindUnavailable, Code: "upstream_unavailable", Message: "the request ended before a provider accepted the task; nothing was created"}
		}
		m, req := cmp.Or(a.Spec, in.Model), cmp.Or(a.Request, &in.Request)
		ad, err := s.adapter(m.Family)
		if err != nil {
			return nil, err
		}
		up, err := ad.Create(a.Provider, m, a.Model, in.Body)
		if err != nil {
			if errors.Is(err, provider.ErrBadRequest) {
				return nil, &Error{Kind: KindBadRequest, Code: "invalid_request", Message: err.Error()}
			}
			return nil, err
		}
		ans, err := s.sent(ctx, a.Provider, up)
		if err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		created, err := ad.Created(ans.Status, ans.Body)
		s.heard(a.Provider.Name, err, false)
		var te *task.Error
		// The adapter's reading of a refusal comes first: Gemini answers a bad key with a 400,
		// which is the gateway's credential, not the client's request.
		switch {
		case err == nil:
		case errors.As(err, &te) && (te.Code == "invalid_request" || te.Code == "content_filter"):
			return nil, &Error{Kind: KindBadRequest, Code: te.Code, Message: fmt.Sprintf("provider %s refused the task: %s", a.Provider.Name, te.Message)}
		case te != nil:
			reasons = append(reasons, fmt.Sprintf("provider %s: %v", a.Provider.Name, err))
			continue
		case ans.Status == http.StatusBadRequest || ans.Status == http.StatusUnprocessableEntity:
			return nil, &Error{Kind: KindBadRequest, Code: "invalid_request", Message: fmt.Sprintf("provider %s refused the task: %v", a.Provider.Name, err)}
		default:
			reasons = append(reasons, fmt.Sprintf("provider %s: %v", a.Provider.Name, err))
			continue
		}
		now := s.Now()
		t := &store.Task{
			ID: store.NewTaskID(in.Kind), Kind: in.Kind, Account: in.Account, KeyID: in.KeyID, RequestID: in.RequestID,
			Model: m.ID, Family: m.Family, Variant: m.Variant, Route: in.Route,
			Provider: a.Provider.Name, ProviderTaskID: cmp.Or(created.TaskID, "-"), Status: string(task.Queued),
			Hold: in.Hold, CallbackURL: req.CallbackURL, RequestedSeconds: req.MaxSeconds,
			CreatedAt: now, UpdatedAt: now, Paid: in.Paid, Trace: in.Trace,
		}
		var ch store.TaskChange
		if created.Done != nil { // the provider answered at once: the task is born finished
			s.apply(t, *created.Done, now)
			ch, _ = s.changeOf(t, "", now)
		}
		ch.Lease = s.lease() // this replica polls the task it created
		err = s.Store.PutTaskChange(t, ch)
		if errors.Is(err, store.ErrUsageNotSettled) {
			s.Log.Error("TASK NOT BILLED: its usage record was refused", "task", t.ID, "account", t.Account, "error", err)
			err, ch.Usage = nil, nil
		}
		if err != nil {
			return nil, s.unrecorded(ctx, ad, a.Provider, m, created.TaskID, err)
		}
		if !t.Terminal() {
			s.sched.track(t.ID, now, now.Add(s.RefreshEvery), s.deadline(t), s.heldUntil(now))
		}
		if s.Changed != nil {
			s.Changed(t, "", ch.Usage)
		}
		return t, nil
	}
	return nil, &Error{Kind: KindUnavailable, Code: "upstream_unavailable", Message: "no provider accepted the task: " + joinReasons(reasons)}
}

// unrecorded answers a create whose task the provider accepted and the store could not record
// (err): the task is cancelled at the provider where its API allows, and either way the
// operator is told loudly (a task left running is one it pays for and nobody can see). Nothing
// is charged.
func (s *Service) unrecorded(ctx context.Context, ad task.Adapter, p *ir.Provider, m *ir.Model, taskID string, err error) error {
	cancelled := false
	if c, ok := ad.(task.Canceler); ok && taskID != "" {
		if up, cerr := c.Cancel(p, m, taskID); cerr == nil {
			ans, derr := s.sent(ctx, p, up)
			cancelled = derr == nil && ans.Status/100 == 2
		}
	}
	s.Log.Error("TASK NOT RECORDED: the provider accepted it but the store failed", "provider", p.Name,
		"provider_task_id", taskID, "cancelled_at_provider", cancelled, "error", err)
	fate := "it was cancelled at the provider"
	if !cancelled {
		fate = "it could not be cancelled at provider " + p.Name + " and may still run there"
	}
	if !errors.Is(err, store.ErrUnavailable) {
		return &Error{Kind: KindInternal, Code: "internal_error", Message: "the task could not be recorded (" + fate + "); it was not charged; retry"}
	}
	return &Error{Kind: KindUnavailable, Code: "store_unavailable", Message: fmt.Sprintf(
		"provider %s accepted the task but the gateway could not record it (its store cannot make records durable), so %s; it was not charged; retry once the gateway records tasks again", p.Name, fate)}
}

// sent makes a provider call that must run to its answer once it is sent (a create, or the
// cancel of a task nobody can see): ctx's deadline bounds it, the client going away does not.
func (s *Service) sent(ctx context.Context, p *ir.Provider, up *provider.Upstream) (Answer, error) {
	call := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		call, cancel = context.WithDeadline(call, d)
		defer cancel()
	}
	return s.Envoy.Do(call, p, up)
}

func joinReasons(r []string) string {
	if len(r) == 0 {
		return "none can take traffic"
	}
	out := r[0]
	for _, x := range r[1:] {
		out += "; " + x
	}
	return out
}

// Get returns account's task id, refreshed from the provider when it is still running and was
// not queried lately. Another account's task is not found.
func (s *Service) Get(ctx context.Context, account, id string) (*store.Task, error) {
	t, err := s.Store.GetTask(id)
	if err != nil && !errors.Is(err, store.ErrTaskNotFound) {
		return nil, &Error{Kind: KindInternal, Code: "internal_error", Message: "the task store failed; retry"}
	}
	if t == nil || t.Account != account {
		return nil, &Error{Kind: KindNotFound, Code: "not_found", Message: fmt.Sprintf("no task %q for this API key's account", clip(id))}
	}
	// Only the replica that polls the task queries its provider; another answers from the store.
	if now := s.Now(); !t.Terminal() && s.sched.polls(t.ID) && (now.Sub(s.sched.lastQuery(t.ID)) >= s.RefreshEvery || !now.Before(s.deadline(t))) {
		if nt, err := s.Refresh(ctx, t); err == nil {
			t = nt
		} // a failed refresh answers from the store: the poller tries again
	}
	return t, nil
}

// Running is the number of tasks the poller is following.
func (s *Service) Running() int { return s.sched.size() }

// Queries is how many provider queries the service has made.
func (s *Service) Queries() int64 { return s.queries.Load() }

// Refresh queries the provider for t and stores what changed, with the callback of a status
// change in the same transaction; a task that ended is billed. A query that changes nothing
// writes nothing. A task still unfinished at its deadline (MaxAge after its creation) fails
// with task_timeout, whatever the provider answered; one its provider has not known for
// UnknownGrace fails with task_expired_or_unknown (expiry.go).
func (s *Service) Refresh(ctx context.Context, t *store.Task) (*store.Task, error) {
	if _, busy := s.refreshing.LoadOrStore(t.ID, struct{}{}); busy {
		return t, nil
	}
	defer s.refreshing.Delete(t.ID)
	cat := s.Catalog()
	p, m := cat.Provider(t.Provider), cat.Model(t.Model)
	s.queries.Add(1)
	st, qerr := s.query(ctx, p, m, t)
	now := s.Now()
	o := answered
	switch {
	case errors.Is(qerr, task.ErrUnknown):
		o = unknownTask
	case qerr != nil:
		o = failed
	}
	n, since := s.sched.queried(t.ID, now, o, s.RefreshEvery)
	switch {
	case o == unknownTask && n >= UnknownConfirmations && now.Sub(since) >= s.unknownGrace():
		return s.commit(t, s.unknownEnd(t, qerr, n, now.Sub(since)), now)
	case o == answered:
		var err error
		if t, err = s.commit(t, st, now); err != nil {
			return t, err
		}
	}
	if !t.Terminal() && !now.Before(s.deadline(t)) {
		return s.commit(t, s.timeoutEnd(t), now)
	}
	if o == failed {
		return t, qerr
	}
	return t, nil
}

// errEnded stops an update of a task that has already ended: its end is final.
var errEnded = errors.New("the task has already ended")

// commit stores the provider's view st of t if it changes anything, with what the change writes
// beside it (changeOf), and bills a task that just ended. A task stored as ended stays as it
// is: a late answer (a success after the task timed out) is logged and changes nothing.
func (s *Service) commit(t *store.Task, st task.State, now time.Time) (*store.Task, error) {
	if probe := *t; !s.apply(&probe, st, now) {
		return t, nil
	}
	var (
		ended  bool
		before string
		usage  *store.UsageRecord
	)
	out, uerr := s.Store.UpdateTask(t.ID, func(r *store.Task) (store.TaskChange, error) {
		if r.Terminal() {
			return store.TaskChange{}, errEnded
		}
		before = r.Status
		s.apply(r, st, now)
		var ch store.TaskChange
		ch, ended = s.changeOf(r, before, now)
		usage = ch.Usage
		return ch, nil
	})
	if errors.Is(uerr, errEnded) {
		if st.Status == task.Completed {
			s.Log.Warn("a provider finished a task after it had ended: the result is not kept and nothing is billed",
				"task", t.ID, "provider", t.Provider, "provider_task_id", t.ProviderTaskID)
		}
		s.sched.forget(t.ID)
		return s.Store.GetTask(t.ID)
	}
	if errors.Is(uerr, store.ErrUsageNotSettled) {
		s.Log.Error("TASK NOT BILLED: its usage record was refused", "task", t.ID, "account", t.Account, "error", uerr)
		uerr, usage = nil, nil
	}
	if uerr != nil {
		// The task stays scheduled as it was stored: the provider is queried again at its next
		// turn and what it says is written then.
		s.Log.Error("task: its new state could not be stored; it is queried and stored again at its next turn",
			"task", t.ID, "provider", t.Provider, "status", st.Status, "error", uerr)
		return t, uerr
	}
	if out.Terminal() {
		s.sched.forget(t.ID)
	}
	if ended && s.Bill != nil {
		s.Bill(out)
	}
	if s.Changed != nil && out.Status != before {
		s.Changed(out, before, usage)
	}
	return out, nil
}

// changeOf is what a task's change from status before writes beside it: the callback of a
// status change, and when the task just ended its price and (billing on) its usage record. It
// reports whether the task just ended.
func (s *Service) changeOf(r *store.Task, before string, now time.Time) (ch store.TaskChange, ended bool) {
	if r.Terminal() && before != r.Status {
		ended = true
		if s.Price != nil {
			r.Cost, r.Overage = billing.Cap(s.Price(r), r.Hold)
			if r.Overage.IsPositive() {
				billing.WarnOverage(s.Log.With("task", r.ID), r.Provider, r.Model, store.ShortID(r.RequestID), r.Cost.Add(r.Overage), r.Hold)
			}
			// A failed task is billed only what its provider charged anyway (I3's tokens).
			r.Settled = r.Status == string(task.Completed) || r.Cost.IsPositive()
			if s.Charge && r.Settled && !r.Paid {
				ch.Usage = usageOf(r, now)
			}
		}
	}
	if r.Status != before && r.CallbackURL != "" {
		// Callbacks carry no image bytes (megabytes each, and a receiver may log bodies): the
		// client fetches them with GET while they are kept.
		bare := *r
		bare.Images = slices.Clone(r.Images)
		for i := range bare.Images {
			bare.Images[i].Data = nil
		}
		body, _ := json.Marshal(ObjectOf(&bare, now))
		ch.Callbacks = []store.Callback{{TaskID: r.ID, Account: r.Account, URL: r.CallbackURL, Body: body}}
	}
	return ch, ended
}

// adapter is family's task adapter.
func (s *Service) adapter(family string) (task.Adapter, error) {
	if s.Adapters != nil {
		return s.Adapters(family)
	}
	return task.For(family)
}

// usageOf is the bill of a completed task: one usage record, under an id that makes settling
// it idempotent.
func usageOf(t *store.Task, now time.Time) *store.UsageRecord {
	return &store.UsageRecord{RequestID: t.RequestID + "." + t.ID, KeyID: t.KeyID, Account: t.Account, Model: t.Model,
		Provider: t.Provider, Route: t.Route, PromptTokens: t.PromptTokens, CompletionTokens: t.CompletionTokens,
		Cost: t.Cost, Overage: t.Overage, Time: now.UTC()}
}

func (s *Service) query(ctx context.Context, p *ir.Provider, m *ir.Model, t *store.Task) (task.State, error) {
	if p == nil || m == nil {
		return task.State{}, fmt.Errorf("provider %q or model %q is no longer configured", t.Provider, t.Model)
	}
	ad, err := s.adapter(m.Family)
	if err != nil {
		return task.State{}, err
	}
	up, err := ad.Query(p, m, t.ProviderTaskID)
	if err != nil {
		return task.State{}, err
	}
	ans, err := s.Envoy.Do(ctx, p, up)
	if err != nil {
		return task.State{}, err
	}
	st, err := ad.Queried(ans.Status, ans.Body)
	s.heard(p.Name, err, true)
	if err != nil {
		return st, err
	}
	if st.Follow != nil {
		if st.Follow.Headers == nil {
			st.Follow.Headers = up.Headers // a follow-up goes with the query's credentials
		}
		fa, err := s.Envoy.Do(ctx, p, st.Follow)
		if err != nil {
			return st, err
		}
		if err := ad.Followed(&st, fa.Status, fa.Body); err != nil {
			return st, err
		}
	}
	return st, nil
}

// clip shortens a client's value quoted in a message, at a character boundary.
func clip(s string) string { return provider.Clip(s, 80) }

// apply records a provider's view of a task and reports whether it changed anything.
func (s *Service) apply(r *store.Task, st task.State, now time.Time) bool {
	was, _ := json.Marshal(r)
	r.Status, r.FamilyStatus = string(st.Status), st.FamilyStatus
	r.Progress = progressOf(st.Status, st.Progress)
	if len(st.Videos) > 0 {
		r.Videos = make([]store.TaskVideo, 0, len(st.Videos)) // never the caller's array
		for _, v := range st.Videos {
			r.Videos = append(r.Videos, store.TaskVideo{URL: v.URL, ExpiresAt: v.ExpiresAt, Seconds: v.Seconds, Width: v.Width, Height: v.Height})
		}
	}
	if len(st.Images) > 0 {
		r.Images = make([]store.TaskImage, 0, len(st.Images))
		for _, im := range st.Images {
			exp := im.ExpiresAt
			if exp.IsZero() && im.Data != nil {
				exp = now.Add(cmp.Or(s.ImageLife, DefaultImageLife))
			}
			r.Images = append(r.Images, store.TaskImage{URL: im.URL, Data: im.Data, MIMEType: im.MIMEType, ExpiresAt: exp, Width: im.Width, Height: im.Height})
		}
	}
	if st.Text != "" {
		r.Text = st.Text
	}
	if st.BilledSeconds.IsPositive() {
		r.BilledSeconds = st.BilledSeconds
	}
	if st.BilledImages > 0 {
		r.BilledImages = st.BilledImages
	}
	if st.PromptTokens > 0 || st.CompletionTokens > 0 {
		r.PromptTokens, r.CompletionTokens = max(st.PromptTokens, 0), max(st.CompletionTokens, 0)
		r.ImageTokens = min(max(st.ImageTokens, 0), r.CompletionTokens)
	}
	if st.Error != nil {
		r.Error = &store.TaskError{Code: st.Error.Code, Message: st.Error.Message}
	}
	if st.Status.Terminal() && r.CompletedAt.IsZero() {
		r.CompletedAt = now
	}
	if is, _ := json.Marshal(r); string(is) == string(was) {
		return false
	}
	r.UpdatedAt = now
	return true
}

// DefaultImageLife is how long the gateway keeps images a provider sent inline.
const DefaultImageLife = 24 * time.Hour

// Images is how many images a finished task produced: the provider's count when it reports
// one, else the images it returned.
func Images(t *store.Task) int64 {
	if t.BilledImages > 0 {
		return t.BilledImages
	}
	if t.Status != string(task.Completed) {
		return 0
	}
	return int64(len(t.Images))
}

// Seconds is what a finished task produced: the provider's usage when it reports it, else the
// videos' durations, else (a provider that reports neither) the duration asked for.
func Seconds(t *store.Task) decimal.Decimal {
	if t.BilledSeconds.IsPositive() {
		return t.BilledSeconds
	}
	sum := decimal.Zero
	for _, v := range t.Videos {
		sum = sum.Add(v.Seconds)
	}
	if sum.IsZero() && t.Status == "completed" {
		return decimal.NewFromInt(t.RequestedSeconds)
	}
	return sum
}
