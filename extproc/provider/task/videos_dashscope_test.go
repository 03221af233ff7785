package task

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

// TestDashScopeValidation: V2's rules (docs/media.md#video-families) per variant, each refusal
// naming the field, the value and what is allowed.
func TestDashScopeValidation(t *testing.T) {
	t2v := &ir.Model{ID: "wan-t2v", Family: "V2", Variant: "t2v"}
	i2v := &ir.Model{ID: "wan-i2v", Family: "V2", Variant: "i2v"}
	frame := `"media":[{"type":"first_frame","url":"https://example.com/a.png"}]`
	for _, c := range []struct {
		m    *ir.Model
		body string
		want string
	}{
		{t2v, `{"input":{"prompt":"a fox"}}`, "max 5"},
		{t2v, `{"input":{"prompt":"a fox"},"parameters":{"duration":15,"ratio":"21:9","resolution":"720P","seed":2147483647,"watermark":false}}`, "max 15"},
		{t2v, `{"input":{"prompt":"a fox"},"parameters":{"duration":16}}`, "parameters.duration 16 is out of range: 3 to 15"},
		{t2v, `{"input":{"prompt":"a fox"},"parameters":{"duration":2}}`, "out of range"},
		{t2v, `{"input":{"prompt":"a fox"},"parameters":{"ratio":"2:1"}}`, `parameters.ratio "2:1" is not allowed`},
		{t2v, `{"input":{"prompt":"a fox"},"parameters":{"resolution":"4K"}}`, `parameters.resolution "4K" is not allowed: use 720P or 1080P`},
		{t2v, `{"input":{"prompt":"a fox"},"parameters":{"seed":-1}}`, "parameters.seed -1 is out of range"},
		{t2v, `{"input":{"prompt":"a fox"},"parameters":{"sead":1}}`, `parameters does not take field "sead"; it takes resolution, ratio, duration, watermark, seed`},
		{t2v, `{"input":{}}`, "input.prompt is required"},
		{t2v, `{"input":{"prompt":"x",` + frame + `}}`, "choose an i2v model"},
		{t2v, `{"prompt":"x"}`, "max 5"}, // the OpenAI SDKs' top-level prompt
		{t2v, `{"input":"a fox"}`, `input must be an object, not a string (got "a fox")`},
		{i2v, `{"input":{"prompt":"x",` + frame + `}}`, "max 5"},
		{i2v, `{"input":{"prompt":"x"}}`, "input.media needs one"},
		{i2v, `{"input":{"media":[{"type":"last_frame","url":"https://x/a.png"}]}}`, `input.media[0].type "last_frame"`},
	} {
		tr, err := dashscopeVideo{}.Validate(c.m, taskReq(t, c.body))
		switch {
		case strings.HasPrefix(c.want, "max "):
			if err != nil || "max "+itoa(tr.MaxSeconds) != c.want {
				t.Errorf("%s %s: %v, max %d; want %s", c.m.Variant, c.body, err, tr.MaxSeconds, c.want)
			}
		case err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), c.want):
			t.Errorf("%s %s: %v; want %q", c.m.Variant, c.body, err, c.want)
		}
	}
}

// TestDashScopeAnswers: the async header on creation, statuses mapped (UNKNOWN: see
// TestUnknownTaskAnswers), usage.duration billed, errors from the HTTP status and code.
func TestDashScopeAnswers(t *testing.T) {
	up, err := dashscopeVideo{}.Create(&ir.Provider{APIKey: "sk-ds"}, &ir.Model{}, "wan2.2-t2v-plus", taskReq(t, `{"model":"wan-t2v","input":{"prompt":"a fox"},"callback_url":"https://h/x"}`))
	if err != nil || up.Headers["x-dashscope-async"] != "enable" || up.Headers["authorization"] != "Bearer sk-ds" ||
		string(up.Body) != `{"input":{"prompt":"a fox"},"model":"wan2.2-t2v-plus"}` {
		t.Fatalf("create %+v %s %v", up, up.Body, err)
	}
	if id, err := (dashscopeVideo{}).Created(200, []byte(`{"output":{"task_status":"PENDING","task_id":"0385dc79"},"request_id":"4909100c"}`)); err != nil || id.TaskID != "0385dc79" {
		t.Fatalf("created %+v %v", id, err)
	}
	var te *Error
	if _, err := (dashscopeVideo{}).Created(400, []byte(`{"code":"DataInspectionFailed","message":"Input data may contain inappropriate content.","request_id":"x"}`)); !errors.As(err, &te) || te.Code != "content_filter" {
		t.Fatalf("inspection: %v", err)
	}
	st, err := dashscopeVideo{}.Queried(200, []byte(`{"request_id":"x","output":{"task_id":"0385dc79","task_status":"SUCCEEDED","submit_time":"2025-09-11 18:59:05.123","end_time":"2025-09-11 19:01:05.123","video_url":"https://dashscope-result.example/a.mp4"},"usage":{"duration":5.0,"video_count":1}}`))
	if err != nil || st.Status != Completed || st.Videos[0].URL == "" || st.BilledSeconds.String() != "5" || st.Videos[0].ExpiresAt.Format("2006-01-02 15:04") != "2025-09-12 19:01" {
		t.Fatalf("succeeded %+v %v", st, err)
	}
	for body, want := range map[string]string{
		`{"output":{"task_status":"FAILED","code":"InternalError.Algo","message":"algo failed"}}`: "internalerror.algo",
		`{"output":{"task_status":"CANCELED"}}`:                                                   "generation_failed",
	} {
		if st, err := (dashscopeVideo{}).Queried(200, []byte(body)); err != nil || st.Status != Failed || st.Error.Code != want {
			t.Errorf("%s: %+v %v", body, st, err)
		}
	}
}

func FuzzValidateDashScope(f *testing.F) {
	f.Add(`{"input":{"prompt":"a fox"},"parameters":{"duration":15,"ratio":"21:9"}}`, true)
	f.Add(`{"input":{"media":[{"type":"first_frame","url":"https://x/a.png"}]}}`, false)
	f.Fuzz(func(t *testing.T, body string, text bool) {
		var r provider.Request
		if err := jsonUnmarshalRequest(body, &r); err != nil {
			return
		}
		m := &ir.Model{Family: "V2", Variant: "i2v"}
		if text {
			m.Variant = "t2v"
		}
		tr, err := dashscopeVideo{}.Validate(m, r)
		if err == nil && (tr.MaxSeconds < 3 || tr.MaxSeconds > 15) {
			t.Fatalf("accepted %s with max %d", body, tr.MaxSeconds)
		}
		if err != nil && (!errors.Is(err, provider.ErrBadRequest) || fuzzcheck.Leak(err.Error()) != "") {
			t.Fatalf("%s: a refusal that is not the client's, or in Go's words: %v", body, err)
		}
	})
}

// TestDashScopeTimesAreShanghai: DashScope writes end_time as "2006-01-02 15:04:05.000" in
// Beijing time (UTC+8), without a zone. A video's expiry is its OSS URL's own Expires when the
// URL carries one, else 24 h after end_time read at +08:00 (read as UTC it was 8 h late, and
// dead links were handed out as live). The recorded shape is DashScope's documented answer.
func TestDashScopeTimesAreShanghai(t *testing.T) {
	end := time.Date(2025, 2, 20, 10, 45, 52, 262e6, time.UTC) // 18:45:52.262 in Beijing
	signed := `{"request_id":"r","output":{"task_id":"t","task_status":"SUCCEEDED","submit_time":"2025-02-20 18:44:40.105","scheduled_time":"2025-02-20 18:44:40.127","end_time":"2025-02-20 18:45:52.262","video_url":"https://dashscope-result-sh.oss-cn-shanghai.aliyuncs.com/1d/f8/20250220/e7d3f375/a.mp4?Expires=1740137152&OSSAccessKeyId=LTAIfake&Signature=fake%3D"},"usage":{"duration":5,"video_count":1}}`
	st, err := dashscopeVideo{}.Queried(200, []byte(signed))
	if err != nil || st.Videos[0].ExpiresAt.Unix() != 1740137152 {
		t.Fatalf("signed URL: expires %v (%d), want its Expires 1740137152; %v", st.Videos[0].ExpiresAt, st.Videos[0].ExpiresAt.Unix(), err)
	}
	plain := strings.Replace(signed, "?Expires=1740137152&OSSAccessKeyId=LTAIfake&Signature=fake%3D", "", 1)
	st, err = dashscopeVideo{}.Queried(200, []byte(plain))
	if want := end.Add(24 * time.Hour); err != nil || !st.Videos[0].ExpiresAt.Equal(want) {
		t.Fatalf("unsigned URL: expires %v, want %v (end_time at +08:00 plus 24 h); %v", st.Videos[0].ExpiresAt.UTC(), want, err)
	}
	// Images read end_time the same way, for URLs without a signature.
	img := `{"output":{"task_id":"t","task_status":"SUCCEEDED","end_time":"2025-02-20 18:45:52.262","results":[{"url":"https://r.example/q.png"}]},"usage":{"image_count":1}}`
	st, err = dashscopeImage{family: "I2"}.Queried(200, []byte(img))
	if want := end.Add(24 * time.Hour); err != nil || !st.Images[0].ExpiresAt.Equal(want) {
		t.Fatalf("image: expires %v, want %v; %v", st.Images[0].ExpiresAt.UTC(), want, err)
	}
	// Without milliseconds too.
	st, err = dashscopeVideo{}.Queried(200, []byte(strings.Replace(plain, "18:45:52.262", "18:45:52", 1)))
	if want := end.Truncate(time.Second).Add(24 * time.Hour); err != nil || !st.Videos[0].ExpiresAt.Equal(want) {
		t.Fatalf("whole seconds: expires %v, want %v; %v", st.Videos[0].ExpiresAt.UTC(), want, err)
	}
}

// TestDashScopeCancel: video and image tasks are cancelled through DashScope's task API.
func TestDashScopeCancel(t *testing.T) {
	p := &ir.Provider{Name: "ds", Type: "dashscope", APIKey: "sk-ds"}
	for _, family := range []string{"V2", "I2"} {
		a, err := For(family)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := a.(Canceler)
		if !ok {
			t.Fatalf("family %s cannot cancel", family)
		}
		up, err := c.Cancel(p, &ir.Model{Family: family}, "task/1")
		if err != nil || up.Method != "POST" || up.Path != "/api/v1/tasks/task%2F1/cancel" || up.Headers["authorization"] != "Bearer sk-ds" {
			t.Fatalf("%s cancel: %+v %v", family, up, err)
		}
	}
}
