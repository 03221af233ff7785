package extproc

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/billing"
	"github.com/tollway/tollway/extproc/core"
	"github.com/tollway/tollway/extproc/internal/fixture"
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/bbolt"
)

// TestStoreOutageRefusesBillableWork: while the store reports an outage, a billable request is
// refused with 503 store_unavailable (no hold taken, nothing recorded) before anything else
// happens; once it recovers, the next is served. Without billing a chat request bills nothing
// and is served through the outage.
func TestStoreOutageRefusesBillableWork(t *testing.T) {
	e, ledger, rec := billedServer(t, "1000", nil)
	var down atomic.Bool
	outage := &store.Outage{Cause: store.CauseDiskFull, Since: testNow}
	e.srv.SetStoreCheck(func() error {
		if down.Load() {
			return outage
		}
		return nil
	})
	down.Store(true)
	for _, body := range []string{shortPrompt, `{"model":"gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`} {
		s := e.open()
		s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
		im := s.roundTrip(requestBody(body)).GetImmediateResponse()
		if im == nil || im.Status.Code != 503 || !strings.Contains(string(im.Body), `"code":"store_unavailable"`) ||
			!strings.Contains(string(im.Body), "its store's disk is full") {
			t.Fatalf("a billable request during the outage: %v", im)
		}
		if h := setHeaders(t, im.Headers); h["retry-after"] == "" {
			t.Fatalf("503 store_unavailable without retry-after: %v", h)
		}
	}
	if avail, _ := ledger.Snapshot("acct-key_valid", "key_valid", testNow); !avail.Equal(decimal.NewFromInt(1000)) || len(rec.all()) != 0 {
		t.Fatalf("a refused request held or billed: available %s, records %v", avail, rec.all())
	}
	down.Store(false)
	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r2", true))
	if im := s.roundTrip(requestBody(shortPrompt)).GetImmediateResponse(); im != nil {
		t.Fatalf("refused after the store recovered: %v", im)
	}

	free := startServer(t, testRuntime())
	free.srv.SetStoreCheck(func() error { return outage })
	s = free.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r3", true))
	if im := s.roundTrip(requestBody(shortPrompt)).GetImmediateResponse(); im != nil {
		t.Fatalf("billing off, a chat request was refused during the outage: %v", im)
	}
}

// holds records what the server makes durable: holds (priced as the writer would) and their
// ends.
type holds struct {
	mu    sync.Mutex
	held  []store.UsageRecord
	ended []string
}

func (h *holds) hold(r store.UsageRecord, price func() decimal.Decimal) {
	if price != nil {
		r.Cost = price()
	}
	h.mu.Lock()
	h.held = append(h.held, r)
	h.mu.Unlock()
}
func (h *holds) end(id string) { h.mu.Lock(); h.ended = append(h.ended, id); h.mu.Unlock() }
func (h *holds) snapshot() ([]store.UsageRecord, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]store.UsageRecord(nil), h.held...), append([]string(nil), h.ended...)
}

// TestHoldsAreDurableAndStreamsCheckpointed: an admitted request's hold goes to durable storage
// at once (its prompt at the bound the hold was sized with), a stream's progress follows at
// most once a second (its prompt then counted, the completion so far), its record settles the
// same id, and a request the provider fails ends its hold.
func TestHoldsAreDurableAndStreamsCheckpointed(t *testing.T) {
	billing.Warm() // a checkpoint counts tokens: load the tokenizer outside the stream's deadlines
	h := &holds{}
	var clock atomic.Int64
	clock.Store(testNow.UnixNano())
	e, _, rec := billedServer(t, "1000", nil, func(b *Billing) {
		b.Hold, b.End = h.hold, h.end
		b.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	})
	tick := func(d time.Duration) { clock.Add(int64(d)) }

	s := e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r1", true))
	s.roundTrip(requestBody(`{"model":"gpt","stream":true,"messages":[{"role":"user","content":"tell me a story"}]}`))
	held, _ := h.snapshot()
	if len(held) != 1 || !strings.HasPrefix(held[0].RequestID, "r1.") || held[0].PromptTokens < 10 || held[0].CompletionTokens != 0 ||
		!held[0].Estimated || held[0].Account != "acct-key_valid" || !held[0].Cost.Equal(decimal.NewFromInt(held[0].PromptTokens)) {
		t.Fatalf("holds after admission %+v: want one, its prompt at the bound (priced $1 a token)", held)
	}
	s.roundTrip(sseHeaders())
	chunk := func(word string) {
		s.roundTrip(bodyChunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\""+word+"\"}}]}\n\n", false))
	}
	chunk("once")
	tick(400 * time.Millisecond)
	chunk(" upon")
	if held, _ = h.snapshot(); len(held) != 1 {
		t.Fatalf("%d holds within the first second: checkpoints must be a second apart", len(held))
	}
	tick(700 * time.Millisecond)
	chunk(" a")
	tick(300 * time.Millisecond)
	chunk(" time")
	tick(800 * time.Millisecond)
	chunk(" there")
	held, _ = h.snapshot()
	if len(held) != 3 {
		t.Fatalf("%d holds after 2.2 s of streaming, want the admission's and 2 checkpoints", len(held))
	}
	first, second := held[1], held[2]
	if first.RequestID != held[0].RequestID || second.RequestID != held[0].RequestID {
		t.Fatalf("checkpoints of another id: %s %s, hold %s", first.RequestID, second.RequestID, held[0].RequestID)
	}
	if first.PromptTokens >= held[0].PromptTokens || first.CompletionTokens != 3 || second.CompletionTokens != 5 || first.Provider != "openai" {
		t.Fatalf("checkpoints %+v then %+v: want the prompt counted (under its bound %d), 3 then 5 completion tokens", first, second, held[0].PromptTokens)
	}
	if want := decimal.NewFromInt(second.PromptTokens + 2*second.CompletionTokens); !second.Cost.Equal(want) {
		t.Fatalf("checkpoint cost %s, want %s", second.Cost, want)
	}
	s.roundTrip(bodyChunk("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n\ndata: [DONE]\n\n", true))
	s.close()
	waitRecords(t, rec, 1)
	if r := rec.all()[0]; r.RequestID != held[0].RequestID || r.Estimated || !r.Cost.Equal(decimal.NewFromInt(17)) {
		t.Fatalf("record %+v: want the hold's id billed from usage ($17)", r)
	}

	s = e.open()
	s.roundTrip(chatHeaders("Bearer "+validSecret, "r2", true))
	s.roundTrip(requestBody(shortPrompt))
	s.roundTrip(servedHeaders("503", "application/json", "openai/gpt"))
	s.roundTrip(responseBody(`{"error":{"message":"overloaded"}}`))
	s.close()
	held, ended := h.snapshot()
	if len(held) != 4 || len(ended) != 1 || ended[0] != held[3].RequestID || len(rec.all()) != 1 {
		t.Fatalf("a failed request: holds %d, ended %v, records %d: want its hold ended, nothing billed", len(held), ended, len(rec.all()))
	}
}

func waitRecords(t *testing.T, rec *recorder, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); len(rec.all()) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d records, want %d", len(rec.all()), n)
		}
	}
}

// TestSharedStoreDownRefusesTaskCreates: with the shared database down (its check failing,
// the spool's healthy), a task create is refused 503 store_unavailable before any provider
// call: the task could not be recorded.
// busyTasks serves the image gateway's models to keys with media tasks on a bbolt store whose
// MiniMax answers every create busy (503), counting the creates it got.
func busyTasks(t *testing.T, keys ...store.Key) (*envoy, *atomic.Int64) {
	var calls atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, `{"base_resp":{"status_code":1002,"status_msg":"busy"}}`, http.StatusServiceUnavailable)
	}))
	t.Cleanup(provider.Close)
	st, err := bbolt.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := startServer(t, core.Compile(fixture.ImageGateway(t), keys))
	svc := &tasks.Service{Store: st, Envoy: &tasks.Envoy{Addr: strings.TrimPrefix(provider.URL, "http://")},
		Log: slog.New(slog.DiscardHandler), Now: time.Now, Catalog: e.srv.TaskCatalog}
	e.srv.SetTasks(&tasks.Endpoints{Service: svc})
	return e, &calls
}

func TestSharedStoreDownRefusesTaskCreates(t *testing.T) {
	e, calls := busyTasks(t, keyRecord("key_valid", validSecret, false))
	e.srv.SetStoreCheck(func() error { return nil }) // the spool takes records
	e.srv.SetSharedStoreCheck(func() error {
		return &store.Outage{Cause: store.CauseUnreachable, Err: errors.New("postgres at db:5432/tollway is unreachable"), Since: testNow}
	})
	s := e.open()
	s.roundTrip(requestHeaders(false, hdr(":method", "POST", true), hdr(":path", "/v1/videos", true),
		hdr("authorization", "Bearer "+validSecret, true), hdr("content-type", "application/json", true)))
	out, _ := s.answers(1, requestBody(`{"model":"hailuo-02","prompt":"a cat"}`)) // after the create's timeout extension
	im := out[0].GetImmediateResponse()
	if im == nil || im.Status.Code != 503 || !strings.Contains(string(im.Body), `"code":"store_unavailable"`) {
		t.Fatalf("a task create with the database down: %v", im)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the provider was called %d times", n)
	}
}
