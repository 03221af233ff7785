package task

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"strings"
	"testing"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

// pngDataURL is a data URL of a w x h PNG, declared as declared.
func pngDataURL(w, h int, declared string) string {
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h)))
	return "data:" + declared + ";base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// TestMiniMaxValidation: every V1 rule of docs/media.md#video-families refuses with a message
// naming the field, the value and what is allowed; valid requests give the longest duration for the
// hold.
func TestMiniMaxValidation(t *testing.T) {
	m := &ir.Model{ID: "hailuo-02", Family: "V1"}
	long := strings.Repeat("é", 2001)
	for body, want := range map[string]string{
		`{"model":"hailuo-02","prompt":"a fox [Pan left]"}`:                         "max 6",
		`{"model":"hailuo-02","prompt":"a fox","duration":10}`:                      "max 10",
		`{"model":"hailuo-02","prompt":"a fox","duration":6,"resolution":"1080P"}`:  "max 6",
		`{"model":"hailuo-02","prompt":"a fox","duration":10,"resolution":"1080P"}`: "duration 10 is not allowed at resolution 1080P",
		`{"model":"hailuo-02","prompt":"a fox","duration":8}`:                       "duration 8 is not allowed",
		`{"model":"hailuo-02","prompt":"a fox","resolution":"720P"}`:                `resolution "720P"`,
		`{"model":"hailuo-02","prompt":"` + long + `"}`:                             "prompt is 2001 characters",
		`{"model":"hailuo-02"}`:                                                                  "send a prompt",
		`{"model":"hailuo-02","prompt":"x","duration":"6"}`:                                      "duration must be an integer",
		`{"model":"hailuo-02","prompt":"x","prompt_optimizer":"yes"}`:                            "prompt_optimizer must be true or false",
		`{"model":"hailuo-02","prompt":"x","sound":true}`:                                        `does not take field "sound"`,
		`{"model":"hailuo-02","first_frame_image":"http://example.com/a.png"}`:                   "max 6", // the provider fetches it
		`{"model":"hailuo-02","first_frame_image":"ftp://example.com/a.png"}`:                    "must be an http or https URL with a host, or a base64 data URL",
		`{"model":"hailuo-02","first_frame_image":"https://example.com/a.png"}`:                  "max 6",
		`{"model":"hailuo-02","first_frame_image":"` + pngDataURL(640, 480, "image/jpeg") + `"}`: "max 6", // the bytes decide, not the MIME type
		`{"model":"hailuo-02","first_frame_image":"` + pngDataURL(640, 300, "image/png") + `"}`:  "short side must be above 300",
		`{"model":"hailuo-02","first_frame_image":"` + pngDataURL(1400, 400, "image/png") + `"}`: "aspect ratio must be between 2:5 and 5:2",
		`{"model":"hailuo-02","first_frame_image":"data:image/png;base64,R0lGODlhAQABAAAAACw="}`: "not a JPG, JPEG, PNG or WebP image",
		`{"model":"hailuo-02","prompt":"x","callback_url":"https://hooks.example.com/v"}`:        "max 6",
	} {
		tr, err := minimax{}.Validate(m, taskReq(t, body))
		switch {
		case strings.HasPrefix(want, "max "):
			if err != nil || "max "+itoa(tr.MaxSeconds) != want {
				t.Errorf("%.90s: %v, max %d; want %s", body, err, tr.MaxSeconds, want)
			}
		case err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), want):
			t.Errorf("%.90s: %v; want %q", body, err, want)
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestMiniMaxAnswers: the three calls of a V1 task, as MiniMax answers them: errors inside
// HTTP 200, statuses mapped, the download URL added by the file look-up with its expiry; the
// gateway's own fields never reach MiniMax.
func TestMiniMaxAnswers(t *testing.T) {
	p := &ir.Provider{Name: "hailuo", APIKey: "mm-key"}
	up, err := minimax{}.Create(p, &ir.Model{}, "MiniMax-Hailuo-02", taskReq(t, `{"model":"hailuo-02","prompt":"a fox","duration":6,"callback_url":"https://h/x","route":{"provider":"hailuo"}}`))
	if err != nil || up.Path != "/v1/video_generation" || up.Headers["authorization"] != "Bearer mm-key" ||
		string(up.Body) != `{"duration":6,"model":"MiniMax-Hailuo-02","prompt":"a fox"}` {
		t.Fatalf("create %+v %s %v", up, up.Body, err)
	}
	if id, err := (minimax{}).Created(200, []byte(`{"task_id":"106916112212032","base_resp":{"status_code":0,"status_msg":"success"}}`)); err != nil || id.TaskID != "106916112212032" {
		t.Fatalf("created %+v %v", id, err)
	}
	var te *Error
	if _, err := (minimax{}).Created(200, []byte(`{"task_id":"","base_resp":{"status_code":1026,"status_msg":"input new_sensitive"}}`)); !errors.As(err, &te) || te.Code != "content_filter" {
		t.Fatalf("sensitive: %v", err)
	}
	if _, err := (minimax{}).Created(200, []byte(`{"base_resp":{"status_code":1002,"status_msg":"rate limit"}}`)); !errors.As(err, &te) || te.Code != "provider_rate_limited" {
		t.Fatalf("rate limit: %v", err)
	}
	for body, want := range map[string]Status{
		`{"status":"Queueing","base_resp":{"status_code":0}}`:   Queued,
		`{"status":"Processing","base_resp":{"status_code":0}}`: InProgress,
		`{"status":"Fail","base_resp":{"status_code":0}}`:       Failed,
	} {
		if st, err := (minimax{}).Queried(200, []byte(body)); err != nil || st.Status != want {
			t.Errorf("%s: %+v %v", body, st, err)
		}
	}
	st, err := minimax{}.Queried(200, []byte(`{"task_id":"1","status":"Success","file_id":"205258526306433","video_width":1920,"video_height":1080,"base_resp":{"status_code":0}}`))
	if err != nil || st.Status != Completed || st.Follow == nil || st.Follow.Path != "/v1/files/retrieve?file_id=205258526306433" {
		t.Fatalf("success %+v %v", st, err)
	}
	err = minimax{}.Followed(&st, 200, []byte(`{"file":{"file_id":205258526306433,"bytes":5896337,"created_at":1700469398,"filename":"output.mp4","purpose":"video_generation","download_url":"https://cdn.minimax.example/output.mp4"},"base_resp":{"status_code":0}}`))
	if err != nil || st.Videos[0].URL != "https://cdn.minimax.example/output.mp4" || st.Videos[0].ExpiresAt.Unix() != 1700469398+3600 || st.Videos[0].Width != 1920 {
		t.Fatalf("followed %+v %v", st, err)
	}
}

func FuzzValidateMiniMax(f *testing.F) {
	f.Add(`{"prompt":"a fox","duration":10,"resolution":"768P"}`)
	f.Add(`{"first_frame_image":"` + pngDataURL(400, 400, "image/png") + `"}`)
	f.Fuzz(func(t *testing.T, body string) {
		var r provider.Request
		if json.Unmarshal([]byte(body), &r) != nil {
			return
		}
		tr, err := minimax{}.Validate(&ir.Model{Family: "V1"}, r)
		if err == nil && tr.MaxSeconds != 6 && tr.MaxSeconds != 10 {
			t.Fatalf("accepted %s with max %d", body, tr.MaxSeconds)
		}
		if err != nil && (!errors.Is(err, provider.ErrBadRequest) || fuzzcheck.Leak(err.Error()) != "") {
			t.Fatalf("%s: a refusal that is not the client's, or in Go's words: %v", body, err)
		}
	})
}

func jsonUnmarshalRequest(body string, r *provider.Request) error {
	return json.Unmarshal([]byte(body), r)
}
