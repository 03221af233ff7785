package e2e

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/test/fakeupstream"
)

// mediaConfig is a gateway config with billing, callbacks to loopback, the tasks: section, a
// MiniMax provider (hailuo-02, V1) and a DashScope one (wan-t2v, V2) on their fakes.
func mediaConfig(tasksSection, minimaxURL, dashscopeURL string) string {
	return fmt.Sprintf(`billing: {enabled: true}
callbacks: {allow_private: [127.0.0.1]}
%s
providers:
  - {name: hailuo, type: minimax, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
  - {name: wan, type: dashscope, base_url: %s, api_key: "${FAKE_PROVIDER_KEY}"}
models:
  - id: hailuo-02
    family: V1
    providers: [{provider: hailuo, model: MiniMax-Hailuo-02}]
    pricing: {request: "0.05", duration: "0.045"}
  - id: wan-t2v
    family: V2
    variant: t2v
    providers: [{provider: wan, model: wan2.2-t2v-plus}]
    pricing: {request: "0.01", duration: "0.02"}
`, tasksSection, minimaxURL, dashscopeURL)
}

// hailuoBody asks for a 6 s MiniMax video (a hold of 0.05 + 6 x 0.045 = 0.32).
func hailuoBody(prompt, callback string) string {
	return `{"model":"hailuo-02","prompt":"` + prompt + `","duration":6,"callback_url":"` + callback + `"}`
}

// wanBody asks for a 5 s DashScope video (a hold of 0.01 + 5 x 0.02 = 0.11).
func wanBody(prompt, callback string) string {
	return `{"model":"wan-t2v","input":{"prompt":"` + prompt + `"},"parameters":{"duration":5},"callback_url":"` + callback + `"}`
}

// waitVideo polls a video task until it ends and returns its object.
func (g *gateway) waitVideo(key, id string, within time.Duration) map[string]any {
	g.t.Helper()
	var obj map[string]any
	waitFor(g.t, "video task "+id+" to end", within, func() bool {
		_, obj = g.do("GET", key, "/videos/"+id, "")
		return obj["status"] == "completed" || obj["status"] == "failed"
	})
	return obj
}

// failedWith checks a task object failed with code, billed nothing, and its message holds words.
func failedWith(t *testing.T, obj map[string]any, code string, words ...string) {
	t.Helper()
	e, _ := obj["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if obj["status"] != "failed" || e["code"] != code || obj["cost"] != nil || obj["progress"] != float64(100) || obj["completed_at"] == nil {
		t.Fatalf("task %v, want failed with %s and no cost", obj, code)
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
}

// TestTaskTimesOutAtMaxAge: a task the provider never finishes holds credits only until
// tasks.max_age after its creation, across a restart: created under a gateway with max_age 1h,
// then the gateway restarts with max_age 8s; the task (its hold taken again at start) fails
// with task_timeout about 8 s after its stored created_at, its hold released (available back
// to the balance, nothing billed, no usage record), its callback delivered.
func TestTaskTimesOutAtMaxAge(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	sink := newCallbackSink(t)
	dir := t.TempDir()
	first := startGatewayIn(t, dir, mediaConfig("tasks: {max_age: 1h}", fake.MiniMaxURL(), fake.DashScopeURL()), "FAKE_PROVIDER_KEY="+providerKey)
	ctx := context.Background()
	if err := first.NewAccount(ctx, "acme", "0.5"); err != nil {
		t.Fatal(err)
	}
	key := first.newKey("acme")
	code, obj := first.do("POST", key, "/videos", hailuoBody("a fox "+fakeupstream.MediaNeverTrigger, sink.URL+"/cb"))
	id, _ := obj["id"].(string)
	if code != 200 || obj["status"] != "queued" {
		t.Fatalf("create: %d %v", code, obj)
	}
	created := time.Unix(int64(obj["created_at"].(float64)), 0)
	if _, avail := first.available("acme"); !avail.Equal(decimal.RequireFromString("0.18")) {
		t.Fatalf("available %s while the task holds 0.32, want 0.18", avail)
	}
	first.Stop()

	g := startGatewayIn(t, dir, mediaConfig("tasks: {max_age: 8s}", fake.MiniMaxURL(), fake.DashScopeURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if _, avail := g.available("acme"); !avail.Equal(decimal.RequireFromString("0.18")) {
		t.Fatalf("available %s after the restart, want the hold taken again (0.18)", avail)
	}
	if code, obj := g.do("GET", key, "/videos/"+id, ""); code != 200 || (obj["status"] != "queued" && obj["status"] != "in_progress") {
		t.Fatalf("before max_age: %d %v", code, obj)
	}
	// Nobody asks: the poller ends it. (Callbacks of one task may arrive out of order.)
	waitFor(t, "the task to time out", 25*time.Second, func() bool { return slices.Contains(sink.statuses(id), "failed") })
	_, obj = g.do("GET", key, "/videos/"+id, "")
	failedWith(t, obj, "task_timeout", "tasks.max_age (8s)", "hailuo", "nothing was billed")
	if age := time.Unix(int64(obj["completed_at"].(float64)), 0).Sub(created); age < 8*time.Second || age > 12*time.Second {
		t.Errorf("timed out %s after its creation, want 8 s (+ a poll tick)", age)
	}
	if bal, avail := g.available("acme"); !bal.Equal(decimal.RequireFromString("0.5")) || !avail.Equal(bal) {
		t.Fatalf("balance %s available %s, want 0.5 and the hold released", bal, avail)
	}
	if recs := g.records("account=acme"); len(recs) != 0 {
		t.Fatalf("usage records %+v", recs)
	}
	sink.verify(t, g.callbackSecret("acme"))
	if !strings.Contains(g.logs.String(), "task timed out") {
		t.Error("the timeout was not logged")
	}
}

// TestUnknownTaskEndsAsExpired: a task the provider forgets (MiniMax answers status_code 2013
// "task not found" inside HTTP 200; DashScope task_status UNKNOWN) is not ended by the first
// such answer (a provider's query side may lag its create), and not left running for ever
// either: after 3 answers in a row spanning tasks.unknown_grace (5 s here) it fails with
// task_expired_or_unknown, its hold released and its callback sent.
func TestUnknownTaskEndsAsExpired(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	sink := newCallbackSink(t)
	g := startGateway(t, mediaConfig("tasks: {unknown_grace: 5s}", fake.MiniMaxURL(), fake.DashScopeURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "1"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	var ids []string
	for _, body := range []string{hailuoBody("a fox "+fakeupstream.MediaForgetTrigger, sink.URL+"/cb"), wanBody("a fox "+fakeupstream.MediaForgetTrigger, sink.URL+"/cb")} {
		code, obj := g.do("POST", key, "/videos", body)
		if code != 200 || obj["status"] != "queued" {
			t.Fatalf("create: %d %v", code, obj)
		}
		ids = append(ids, obj["id"].(string))
		// The first answer (this GET's refresh) says the provider does not know it: still running.
		if code, obj := g.do("GET", key, "/videos/"+ids[len(ids)-1], ""); code != 200 || obj["status"] != "queued" {
			t.Fatalf("after one unknown answer: %d %v", code, obj)
		}
	}
	start := time.Now()
	for i, id := range ids {
		obj := g.waitVideo(key, id, 25*time.Second)
		failedWith(t, obj, "task_expired_or_unknown", "does not know task", []string{"task not found", "UNKNOWN"}[i], "nothing was billed")
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("ended %s after the first unknown answer, before the grace of 5 s", took)
	}
	if bal, avail := g.available("acme"); !bal.Equal(decimal.RequireFromString("1")) || !avail.Equal(bal) {
		t.Fatalf("balance %s available %s, want 1 and both holds released", bal, avail)
	}
	for _, id := range ids {
		waitFor(t, "the callback of "+id, 15*time.Second, func() bool { return slices.Contains(sink.statuses(id), "failed") })
	}
}

// TestDashScopeVideoExpiresAtItsURL: a DashScope video's expires_at is the Expires of its OSS
// signed URL (an hour here, not 24 h), and for a URL without a signature 24 h after end_time,
// which DashScope writes in Beijing time (read as UTC it was 8 hours late).
func TestDashScopeVideoExpiresAtItsURL(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, mediaConfig("", fake.MiniMaxURL(), fake.DashScopeURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "1"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	var ids []string
	for _, p := range []string{"a fox", "a fox " + fakeupstream.DashScopeUnsignedTrigger} {
		code, obj := g.do("POST", key, "/videos", wanBody(p, ""))
		if code != 200 {
			t.Fatalf("create: %d %v", code, obj)
		}
		ids = append(ids, obj["id"].(string))
	}
	signed := g.waitVideo(key, ids[0], 30*time.Second)
	video := signed["result"].(map[string]any)["videos"].([]any)[0].(map[string]any)
	u, _ := url.Parse(video["url"].(string))
	exp, _ := strconv.ParseInt(u.Query().Get("Expires"), 10, 64)
	if signed["status"] != "completed" || exp == 0 || signed["expires_at"] != float64(exp) || video["expires_at"] != float64(exp) {
		t.Fatalf("signed URL %s: expires_at %v, want its Expires %d; %v", u, signed["expires_at"], exp, signed)
	}
	plain := g.waitVideo(key, ids[1], 30*time.Second)
	done := time.Unix(int64(plain["completed_at"].(float64)), 0)
	at := time.Unix(int64(plain["expires_at"].(float64)), 0)
	if d := at.Sub(done.Add(24 * time.Hour)); d < -time.Minute || d > time.Minute {
		t.Fatalf("unsigned URL: expires_at %s is %s from 24 h after it ended (%s)", at.UTC(), d, done.UTC())
	}
}

// TestMediaProviderRefusalClears: a media-only provider refusing the gateway's credential
// (DashScope's 401; MiniMax's status_code 1004 inside an HTTP 200) shows is_ready false in the
// catalog and the refusal in the admin status, and a create it would take says the provider
// refused the key (not that none is configured). Once the key works again, a create reaches the
// provider within the retry schedule (15 s) and succeeds; a config reload retries at once.
func TestMediaProviderRefusalClears(t *testing.T) {
	t.Parallel()
	mm := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	ds := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	g := startGateway(t, mediaConfig("", mm.MiniMaxURL(), ds.DashScopeURL()), "FAKE_PROVIDER_KEY="+providerKey)
	if err := g.NewAccount(context.Background(), "acme", "10"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	mm.SetAPIKey("revoked-at-the-provider")
	ds.SetAPIKey("revoked-at-the-provider")
	for _, c := range []struct{ model, body string }{{"hailuo-02", hailuoBody("a fox", "")}, {"wan-t2v", wanBody("a fox", "")}} {
		code, obj := g.do("POST", key, "/videos", c.body)
		if e, _ := obj["error"].(map[string]any); code != 503 || e["code"] != "upstream_unavailable" {
			t.Fatalf("%s refused: %d %v", c.model, code, obj)
		}
		waitFor(t, c.model+" not ready", 5*time.Second, func() bool { return g.catalogEntries()[c.model]["is_ready"] == false })
	}
	providers := func() map[string]map[string]any {
		_, st := g.adminJSON("GET", "/admin/v1/status", nil)
		out := map[string]map[string]any{}
		for _, p := range st["providers"].([]any) {
			out[p.(map[string]any)["name"].(string)] = p.(map[string]any)
		}
		return out
	}
	for name, p := range providers() {
		r, _ := p["refused"].(map[string]any)
		if r == nil || r["count"].(float64) < 1 || r["since"] == nil || r["next_retry"] == nil {
			t.Fatalf("status of %s: %v, want its refusal", name, p)
		}
	}
	// Within the retry window the provider is not asked again, and the answer says why.
	before := ds.RequestCount()
	code, obj := g.do("POST", key, "/videos", wanBody("a fox", ""))
	e, _ := obj["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if code != 503 || e["code"] != "model_unavailable" || !strings.Contains(msg, "provider wan refused the gateway's credential") || strings.Contains(msg, "no API key") || ds.RequestCount() != before {
		t.Fatalf("within the retry window: %d %v (%d provider requests)", code, obj, ds.RequestCount()-before)
	}

	// The key works again: a create within the schedule reaches the provider and succeeds.
	mm.SetAPIKey(providerKey)
	ds.SetAPIKey(providerKey)
	fixed := time.Now()
	for _, body := range []string{hailuoBody("a fox", ""), wanBody("a fox", "")} {
		waitFor(t, "a create to reach the provider again", 25*time.Second, func() bool {
			code, _ := g.do("POST", key, "/videos", body)
			return code == 200
		})
	}
	if took := time.Since(fixed); took > 20*time.Second {
		t.Errorf("the refusals cleared %s after the keys were fixed, want within the 15 s schedule", took)
	}
	for _, m := range []string{"hailuo-02", "wan-t2v"} {
		if g.catalogEntries()[m]["is_ready"] != true {
			t.Fatalf("%s not ready after its provider accepted the key", m)
		}
	}
	for name, p := range providers() {
		if p["refused"] != nil {
			t.Fatalf("status of %s still shows a refusal: %v", name, p)
		}
	}

	// A config reload (credentials read again) retries at once, without waiting for the schedule.
	mm.SetAPIKey("revoked-again")
	if code, _ := g.do("POST", key, "/videos", hailuoBody("a fox", "")); code != 503 {
		t.Fatalf("revoked again: %d", code)
	}
	mm.SetAPIKey(providerKey)
	if code, out := g.adminJSON("POST", "/admin/v1/reload", nil); code != 200 {
		t.Fatalf("reload: %d %v", code, out)
	}
	if code, obj := g.do("POST", key, "/videos", hailuoBody("a fox", "")); code != 200 {
		t.Fatalf("after the reload: %d %v", code, obj)
	}
}
