package fakeupstream

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVideoFakesUnhappyTasks: the video fakes answer as the real APIs do for a task that never
// finishes (running at every query) and for one they no longer know (MiniMax 2013 in an HTTP
// 200, DashScope UNKNOWN, Kling 404 code 1203); DashScope writes end_time in Beijing time and
// signs its video URL with Expires; a key the provider revoked (SetAPIKey) is refused.
func TestVideoFakesUnhappyTasks(t *testing.T) {
	s := Start(t, Options{APIKey: "k", KlingAccessKey: "ak", KlingSecretKey: "sk"})
	mm := map[string]string{"Authorization": "Bearer k", "Content-Type": "application/json"}
	create := func(prompt string) string {
		_, out := imageCall(t, s, "POST", "/v1/video_generation", mm, `{"model":"MiniMax-Hailuo-02","prompt":"`+prompt+`"}`)
		return out["task_id"].(string)
	}
	never, lost := create("a fox "+MediaNeverTrigger), create("a fox "+MediaForgetTrigger)
	for i := 0; i < 6; i++ {
		if _, q := imageCall(t, s, "GET", "/v1/query/video_generation?task_id="+never, mm, ""); q["status"] != "Processing" && i >= 2 {
			t.Fatalf("MiniMax never-finishing task at query %d: %v", i, q)
		}
	}
	if _, q := imageCall(t, s, "GET", "/v1/query/video_generation?task_id="+lost, mm, ""); q["base_resp"].(map[string]any)["status_code"] != float64(2013) {
		t.Fatalf("MiniMax forgotten task: %v", q)
	}
	s.SetAPIKey("rotated")
	if _, q := imageCall(t, s, "GET", "/v1/query/video_generation?task_id="+never, mm, ""); q["base_resp"].(map[string]any)["status_code"] != float64(1004) {
		t.Fatalf("MiniMax with a revoked key: %v", q)
	}
	s.SetAPIKey("k")

	ds := map[string]string{"Authorization": "Bearer k", "Content-Type": "application/json", "X-DashScope-Async": "enable"}
	dsCreate := func(prompt string) string {
		_, out := imageCall(t, s, "POST", "/api/v1/services/aigc/video-generation/video-synthesis", ds, `{"model":"wan2.2-t2v-plus","input":{"prompt":"`+prompt+`"}}`)
		return out["output"].(map[string]any)["task_id"].(string)
	}
	done, dsNever, dsLost := dsCreate("a fox"), dsCreate("a fox "+MediaNeverTrigger), dsCreate("a fox "+MediaForgetTrigger)
	var out map[string]any
	for i := 0; i < 4; i++ {
		_, q := imageCall(t, s, "GET", "/api/v1/tasks/"+done, ds, "")
		out = q["output"].(map[string]any)
		_, q = imageCall(t, s, "GET", "/api/v1/tasks/"+dsNever, ds, "")
		if st := q["output"].(map[string]any)["task_status"]; i > 0 && st != "RUNNING" {
			t.Fatalf("DashScope never-finishing task at query %d: %v", i, st)
		}
	}
	end, err := time.ParseInLocation("2006-01-02 15:04:05.000", out["end_time"].(string), beijing)
	if err != nil || time.Since(end).Abs() > time.Minute {
		t.Fatalf("end_time %v is not now in Beijing time: %v", out["end_time"], err)
	}
	u, _ := url.Parse(out["video_url"].(string))
	exp, _ := strconv.ParseInt(u.Query().Get("Expires"), 10, 64)
	if time.Until(time.Unix(exp, 0)) <= 50*time.Minute || u.Query().Get("Signature") == "" {
		t.Fatalf("video URL %s: want an OSS signature expiring in an hour", u)
	}
	if code, body := imageGet(t, u.String()); code != 200 || !strings.HasPrefix(body, "video/mp4") {
		t.Fatalf("video download: %d %s", code, body)
	}
	if _, q := imageCall(t, s, "GET", "/api/v1/tasks/"+dsLost, ds, ""); q["output"].(map[string]any)["task_status"] != "UNKNOWN" {
		t.Fatalf("DashScope forgotten task: %v", q)
	}

	kl := klingToken(t, "ak", "sk")
	_, created := imageCall(t, s, "POST", "/v1/videos/text2video", kl, `{"model_name":"kling-v2","prompt":"a fox `+MediaForgetTrigger+`"}`)
	id := created["data"].(map[string]any)["task_id"].(string)
	if code, q := imageCall(t, s, "GET", "/v1/videos/text2video/"+id, kl, ""); code != 404 || q["code"] != float64(1203) {
		t.Fatalf("Kling forgotten task: %d %v", code, q)
	}
}
