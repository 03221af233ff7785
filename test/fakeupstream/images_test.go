package fakeupstream

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// imageCall sends method path (below the host root) with headers and body and decodes the JSON answer.
func imageCall(t *testing.T, s *Server, method, path string, header map[string]string, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, s.KlingURL()+path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

func klingToken(t *testing.T, access, secret string) map[string]string {
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Issuer: access,
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Minute)), NotBefore: jwt.NewNumericDate(time.Now().Add(-5 * time.Second))}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
}

func imageGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type") + " " + string(b)
}

// TestKlingImages: the Kling image API as the real one behaves: a signed JWT required, model
// ignored for model_name, parameters checked with Kling's codes, a task's progress over polls to
// n images whose URLs expire, failures, policy refusals, unknown ids.
func TestKlingImages(t *testing.T) {
	s := Start(t, Options{KlingAccessKey: "ak", KlingSecretKey: "sk", MediaURLTTL: 2 * time.Second})
	h := klingToken(t, "ak", "sk")
	if code, out := imageCall(t, s, "POST", "/v1/images/generations", nil, `{"prompt":"a fox"}`); code != 401 || out["code"] != float64(1001) {
		t.Fatalf("no token: %d %v", code, out)
	}
	if code, out := imageCall(t, s, "POST", "/v1/images/generations", klingToken(t, "ak", "wrong"), `{"prompt":"a fox"}`); code != 401 || out["code"] != float64(1002) {
		t.Fatalf("bad signature: %d %v", code, out)
	}
	for body, want := range map[string]float64{
		`{"prompt":"a fox","n":10}`:                        1201,
		`{"prompt":"a fox","aspect_ratio":"5:4"}`:          1201,
		`{"prompt":""}`:                                    1201,
		`{"prompt":"a fox #policy"}`:                       1301,
		`{"prompt":"a fox #create-error","n":2}`:           1303,
		`{"model_name":"kling-v2-1","prompt":"x","n":"2"}`: 1201,
	} {
		if code, out := imageCall(t, s, "POST", "/v1/images/generations", h, body); code < 400 || out["code"] != want {
			t.Errorf("%s: %d %v, want code %v", body, code, out, want)
		}
	}
	imageCall(t, s, "POST", "/v1/images/generations", h, `{"model":"kling-v2-1","prompt":"a fox"}`)
	_, out2 := imageCall(t, s, "POST", "/v1/images/generations", h, `{"model_name":"kling-v2-1","prompt":"a fox","n":3,"aspect_ratio":"21:9"}`)
	_, failing := imageCall(t, s, "POST", "/v1/images/generations", h, `{"model_name":"kling-v2-1","prompt":"a fox #fail-task"}`)
	if m := s.KlingImageModels(); len(m) != 3 || m[0] != "kling-v1" || m[1] != "kling-v2-1" {
		t.Fatalf("models run: %v", m)
	}
	id := out2["data"].(map[string]any)["task_id"].(string)
	var statuses []string
	var data map[string]any
	for range 4 {
		_, q := imageCall(t, s, "GET", "/v1/images/generations/"+id, h, "")
		data = q["data"].(map[string]any)
		statuses = append(statuses, data["task_status"].(string))
	}
	if strings.Join(statuses, ",") != "submitted,processing,processing,succeed" {
		t.Fatalf("statuses %v", statuses)
	}
	images := data["task_result"].(map[string]any)["images"].([]any)
	if len(images) != 3 || images[2].(map[string]any)["index"] != float64(2) {
		t.Fatalf("images %v", images)
	}
	url := images[0].(map[string]any)["url"].(string)
	if code, body := imageGet(t, url); code != 200 || !strings.HasPrefix(body, "image/png \x89PNG") {
		t.Fatalf("image URL: %d %.20q", code, body)
	}
	fid := failing["data"].(map[string]any)["task_id"].(string)
	for range 3 {
		imageCall(t, s, "GET", "/v1/images/generations/"+fid, h, "")
	}
	if _, q := imageCall(t, s, "GET", "/v1/images/generations/"+fid, h, ""); q["data"].(map[string]any)["task_status"] != "failed" {
		t.Fatalf("failing task %v", q)
	}
	if code, q := imageCall(t, s, "GET", "/v1/images/generations/nope", h, ""); code != 404 || q["code"] != float64(1203) {
		t.Fatalf("unknown task: %d %v", code, q)
	}
	if code, q := imageCall(t, s, "GET", "/v1/videos/text2video/"+id, h, ""); code != 404 {
		t.Fatalf("an image task is not a video task: %d %v", code, q)
	}
	s.FailNext(503, "")
	if code, q := imageCall(t, s, "POST", "/v1/images/generations", h, `{"prompt":"a fox"}`); code != 503 || q["code"] != float64(5000) {
		t.Fatalf("scripted failure: %d %v", code, q)
	}
	time.Sleep(2100 * time.Millisecond)
	if code, body := imageGet(t, url); code != 403 || !strings.Contains(body, "expired") {
		t.Fatalf("expired image URL: %d %s", code, body)
	}
}

// TestDashScopeImages: the three DashScope image APIs: the async header required by the
// asynchronous ones and refused by the synchronous one, Qwen-Image's text2image shape (models
// and n checked), Wan's messages shape with sequential sets billed by usage.image_count, the
// synchronous answer, progress over polls, failures, policy refusals, unknown ids, expiring URLs.
func TestDashScopeImages(t *testing.T) {
	s := Start(t, Options{APIKey: "sk-ds", MediaURLTTL: 2 * time.Second})
	async := map[string]string{"Authorization": "Bearer sk-ds", "X-DashScope-Async": "enable"}
	direct := map[string]string{"Authorization": "Bearer sk-ds"}
	const (
		t2i  = "/api/v1/services/aigc/text2image/image-synthesis"
		gen  = "/api/v1/services/aigc/image-generation/generation"
		sync = "/api/v1/services/aigc/multimodal-generation/generation"
	)
	msg := func(text, params string) string {
		return `{"model":"wan2.7-image","input":{"messages":[{"role":"user","content":[{"text":"` + text + `"}]}]},"parameters":` + params + `}`
	}
	for _, c := range []struct {
		path   string
		header map[string]string
		body   string
		status int
		code   string
	}{
		{gen, map[string]string{"X-DashScope-Async": "enable"}, msg("a fox", `{}`), 401, "InvalidApiKey"},
		{gen, direct, msg("a fox", `{}`), 403, "AccessDenied"},
		{t2i, direct, `{"model":"qwen-image-plus","input":{"prompt":"a fox"}}`, 403, "AccessDenied"},
		{sync, async, msg("a fox", `{}`), 403, "AccessDenied"},
		{t2i, async, `{"model":"qwen-image-max","input":{"prompt":"a fox"}}`, 400, "InvalidParameter"},
		{t2i, async, `{"model":"qwen-image-plus","input":{"messages":[]}}`, 400, "InvalidParameter"},
		{t2i, async, `{"model":"qwen-image-plus","input":{"prompt":"a fox"},"parameters":{"n":2}}`, 400, "InvalidParameter"},
		{gen, async, `{"model":"wan2.7-image","input":{"prompt":"a fox"}}`, 400, "InvalidParameter"},
		{gen, async, msg("a fox #policy", `{}`), 400, "DataInspectionFailed"},
		{gen, async, msg("a fox #create-error", `{}`), 429, "Throttling.RateQuota"},
		{sync, direct, msg("a fox #fail-task", `{}`), 500, "InternalError.Algo"},
	} {
		if code, out := imageCall(t, s, "POST", c.path, c.header, c.body); code != c.status || out["code"] != c.code || out["request_id"] == nil {
			t.Errorf("%s %s: %d %v, want %d %s", c.path, c.body, code, out, c.status, c.code)
		}
	}
	poll := func(id string) map[string]any {
		var out map[string]any
		for range 4 {
			_, q := imageCall(t, s, "GET", "/api/v1/tasks/"+id, direct, "")
			out = q
		}
		return out
	}
	taskID := func(out map[string]any) string { return out["output"].(map[string]any)["task_id"].(string) }

	_, created := imageCall(t, s, "POST", t2i, async, `{"model":"qwen-image-plus","input":{"prompt":"a fox"},"parameters":{"size":"1664*928","n":1}}`)
	done := poll(taskID(created))
	results := done["output"].(map[string]any)["results"].([]any)
	usage := done["usage"].(map[string]any)
	if done["output"].(map[string]any)["task_status"] != "SUCCEEDED" || len(results) != 1 || usage["image_count"] != float64(1) || usage["width"] != float64(1664) {
		t.Fatalf("text2image %v", done)
	}
	url := results[0].(map[string]any)["url"].(string)
	if !strings.Contains(url, "?Expires=") {
		t.Fatalf("result URL %s is not signed", url)
	}
	if code, body := imageGet(t, url); code != 200 || !strings.HasPrefix(body, "image/png") {
		t.Fatalf("result URL: %d %.20q", code, body)
	}

	_, created = imageCall(t, s, "POST", gen, async, msg("a comic in four panels", `{"enable_sequential":true,"n":4}`))
	var seen []string
	for range 4 {
		_, q := imageCall(t, s, "GET", "/api/v1/tasks/"+taskID(created), direct, "")
		seen = append(seen, q["output"].(map[string]any)["task_status"].(string))
		done = q
	}
	content := done["output"].(map[string]any)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].([]any)
	if strings.Join(seen, ",") != "PENDING,RUNNING,RUNNING,SUCCEEDED" || len(content) != 3 || done["usage"].(map[string]any)["image_count"] != float64(3) {
		t.Fatalf("sequential set: %v %v", seen, done)
	}

	code, answer := imageCall(t, s, "POST", sync, direct, `{"model":"qwen-image-max","input":{"messages":[{"role":"user","content":[{"text":"a fox"}]}]},"parameters":{"size":"1328*1328"}}`)
	choices := answer["output"].(map[string]any)["choices"].([]any)
	if code != 200 || len(choices) != 1 || answer["usage"].(map[string]any)["image_count"] != float64(1) {
		t.Fatalf("sync answer: %d %v", code, answer)
	}

	for prompt, want := range map[string]string{"#fail-task": "InternalError.Algo", "#policy-output": "DataInspectionFailed"} {
		_, created = imageCall(t, s, "POST", gen, async, msg("a fox "+prompt, `{}`))
		if out := poll(taskID(created))["output"].(map[string]any); out["task_status"] != "FAILED" || out["code"] != want {
			t.Errorf("%s: %v", prompt, out)
		}
	}
	if _, q := imageCall(t, s, "GET", "/api/v1/tasks/never-made", direct, ""); q["output"].(map[string]any)["task_status"] != "UNKNOWN" {
		t.Fatalf("unknown task: %v", q)
	}
	s.Script(Fault{Status: 429})
	if code, out := imageCall(t, s, "POST", gen, async, msg("a fox", `{}`)); code != 429 || out["code"] != "Throttling.RateQuota" {
		t.Fatalf("scripted failure: %d %v", code, out)
	}
	time.Sleep(2100 * time.Millisecond)
	if code, _ := imageGet(t, url); code != 403 {
		t.Fatalf("expired result URL: %d", code)
	}
}
