package task

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

// TestKlingImageValidation: I1's fields (the spec's, checked with V3's rules, and Kling's n,
// negative_prompt and image aspect ratios), each refusal naming the field, the value and what is
// allowed; n sizes the hold.
func TestKlingImageValidation(t *testing.T) {
	m := &ir.Model{ID: "kling-image", Family: "I1"}
	long := strings.Repeat("é", 2501)
	for body, want := range map[string]string{
		`{"prompt":"a fox"}`:       "max 1",
		`{"prompt":"a fox","n":9}`: "max 9",
		`{"prompt":"a fox","n":1}`: "max 1",
		`{"model":"kling-image","prompt":"a fox","n":4,"aspect_ratio":"21:9","negative_prompt":"blur","cfg_scale":0.5,"mode":"pro","duration":"10","callback_url":"https://h/x","route":{"provider":"kling"}}`: "max 4",
		`{"prompt":"a fox","aspect_ratio":"3:2"}`:           "max 1",
		`{"prompt":"a fox","n":0}`:                          "n 0 is out of range: Kling makes 1 to 9 images a request",
		`{"prompt":"a fox","n":10}`:                         "n 10 is out of range",
		`{"prompt":"a fox","n":"2"}`:                        `n must be an integer, not a string (got "2")`,
		`{"prompt":"a fox","n":1.5}`:                        "n must be an integer, not a number (got 1.5)",
		`{"prompt":"a fox","aspect_ratio":"5:4"}`:           `aspect_ratio "5:4" is not allowed: use 16:9, 9:16, 1:1, 4:3, 3:4, 3:2, 2:3 or 21:9`,
		`{"prompt":"a fox","cfg_scale":1.5}`:                "cfg_scale 1.5 is not allowed: a number from 0 to 1",
		`{"prompt":"a fox","cfg_scale":"0.5"}`:              `cfg_scale must be a number from 0 to 1, not a string (got "0.5")`,
		`{"prompt":"a fox","mode":"ultra"}`:                 `mode "ultra" is not allowed: use std or pro`,
		`{"prompt":"a fox","duration":5}`:                   `duration must be a string for I1: "5" or "10"`,
		`{"prompt":"a fox","duration":"7"}`:                 `duration "7" is not allowed: use "5" or "10"`,
		`{"n":2}`:                                           "prompt is required (I1 is text-to-image)",
		`{"prompt":""}`:                                     "prompt is required",
		`{"prompt":42}`:                                     "prompt must be a string",
		`{"prompt":"` + long + `"}`:                         "prompt is 2501 characters; Kling takes at most 2500",
		`{"prompt":"x","negative_prompt":"` + long + `"}`:   "negative_prompt is 2501 characters",
		`{"prompt":"a fox","image":"https://x/a.png"}`:      `I1 does not take field "image"; its fields are prompt, negative_prompt, n, aspect_ratio, cfg_scale, mode, duration`,
		`{"prompt":"a fox","resolution":"2k"}`:              `does not take field "resolution"`,
		`{"prompt":"a fox","model_name":"kling-v1"}`:        `does not take field "model_name"`,
		`{"prompt":"a fox","callback_url":7}`:               "callback_url must be a string",
		`{"prompt":"a fox","aspect_ratio":["16:9"]}`:        "aspect_ratio must be a string",
		`{"prompt":"a fox","negative_prompt":{"a":"b"}}`:    "negative_prompt must be a string",
		`{"prompt":"a fox","n":2,"duration":"5","mode":""}`: `mode "" is not allowed`,
	} {
		tr, err := klingImage{}.Validate(m, taskReq(t, body))
		switch {
		case strings.HasPrefix(want, "max "):
			if err != nil || "max "+itoa(tr.MaxImages) != want || tr.MaxSeconds != 0 {
				t.Errorf("%.80s: %v, max %d images; want %s", body, err, tr.MaxImages, want)
			}
		case err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), want):
			t.Errorf("%.80s: %v; want %q", body, err, want)
		}
	}
	tr, err := klingImage{}.Validate(m, taskReq(t, `{"prompt":"a fox","callback_url":"https://hooks.example.com/i"}`))
	if err != nil || tr.CallbackURL != "https://hooks.example.com/i" {
		t.Fatalf("callback_url: %+v %v", tr, err)
	}
}

// TestKlingImageCreate: the create goes to Kling's image endpoint with model_name (never model)
// and a signed JWT; the spec's video fields (cfg_scale, mode, duration) and the gateway's own
// are not sent.
func TestKlingImageCreate(t *testing.T) {
	p := &ir.Provider{Name: "kling", AccessKey: "ak-img", SecretKey: "sk-img"}
	up, err := klingImage{}.Create(p, &ir.Model{ID: "kling-image", Family: "I1"}, "kling-v2-1", taskReq(t,
		`{"model":"kling-image","prompt":"a fox","negative_prompt":"blur","n":3,"aspect_ratio":"4:3","cfg_scale":0.5,"mode":"pro","duration":"5","callback_url":"https://h/x","route":{"provider":"kling"}}`))
	if err != nil || up.Method != "" || up.Path != "/v1/images/generations" ||
		string(up.Body) != `{"aspect_ratio":"4:3","model_name":"kling-v2-1","n":3,"negative_prompt":"blur","prompt":"a fox"}` {
		t.Fatalf("create %+v %s %v", up, up.Body, err)
	}
	raw := strings.TrimPrefix(up.Headers["authorization"], "Bearer ")
	claims := jwt.RegisteredClaims{}
	if _, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return []byte("sk-img"), nil }, jwt.WithValidMethods([]string{"HS256"})); err != nil || claims.Issuer != "ak-img" {
		t.Fatalf("token %q: %v %+v", raw, err, claims)
	}
	q, err := klingImage{}.Query(p, nil, "CjMT7W/dS")
	if err != nil || q.Method != "GET" || q.Path != "/v1/images/generations/CjMT7W%2FdS" || !strings.HasPrefix(q.Headers["authorization"], "Bearer ey") {
		t.Fatalf("query %+v %v", q, err)
	}
	if _, err := (klingImage{}).Create(&ir.Provider{Name: "kling"}, &ir.Model{}, "kling-v1", taskReq(t, `{"prompt":"x"}`)); err == nil {
		t.Fatal("created without a key pair")
	}
}

// TestKlingImageAnswers: Kling's envelope read for images: statuses, the images of a succeed
// with Kling's 30-day retention, failures, codes, and an unknown task id that ends the task.
func TestKlingImageAnswers(t *testing.T) {
	if c, err := (klingImage{}).Created(200, []byte(`{"code":0,"message":"SUCCEED","request_id":"r","data":{"task_id":"CjMT7WdSwWcAAAAAALvB3g","task_status":"submitted","created_at":1733851336696}}`)); err != nil || c.TaskID != "CjMT7WdSwWcAAAAAALvB3g" || c.Done != nil {
		t.Fatalf("created %+v %v", c, err)
	}
	var te *Error
	for body, want := range map[string]string{
		`{"code":1301,"message":"Failure to pass the risk control system"}`: "content_filter",
		`{"code":1201,"message":"n must be in [1,9]"}`:                      "invalid_request",
		`{"code":1303,"message":"parallel task over resource pack limit"}`:  "provider_rate_limited",
		`{"code":1002,"message":"Authorization is invalid"}`:                "provider_auth_failed",
		`{"code":5000,"message":"internal error"}`:                          "upstream_error",
	} {
		status := map[string]int{"content_filter": 400, "invalid_request": 400, "provider_rate_limited": 429, "provider_auth_failed": 401, "upstream_error": 500}[want]
		if _, err := (klingImage{}).Created(status, []byte(body)); !errors.As(err, &te) || te.Code != want {
			t.Errorf("%s: %v, want %s", body, err, want)
		}
	}
	for body, want := range map[string]Status{
		`{"code":0,"data":{"task_id":"1","task_status":"submitted"}}`:  Queued,
		`{"code":0,"data":{"task_id":"1","task_status":"processing"}}`: InProgress,
	} {
		if st, err := (klingImage{}).Queried(200, []byte(body)); err != nil || st.Status != want || st.FamilyStatus == "" {
			t.Errorf("%s: %+v %v", body, st, err)
		}
	}
	st, err := klingImage{}.Queried(200, []byte(`{"code":0,"message":"SUCCEED","data":{"task_id":"1","task_status":"succeed","task_status_msg":"","task_result":{"images":[{"index":0,"url":"https://cdn.klingai.com/a-0.png"},{"index":1,"url":"https://cdn.klingai.com/a-1.png"}]}}}`))
	if err != nil || st.Status != Completed || len(st.Images) != 2 || st.Images[1].URL != "https://cdn.klingai.com/a-1.png" || st.BilledImages != 0 {
		t.Fatalf("succeed %+v %v", st, err)
	}
	if d := time.Until(st.Images[0].ExpiresAt); d < 29*24*time.Hour || d > 30*24*time.Hour {
		t.Fatalf("expiry in %s, want Kling's 30 days", d)
	}
	if _, err := (klingImage{}).Queried(200, []byte(`{"code":0,"data":{"task_status":"succeed","task_result":{"images":[]}}}`)); err == nil {
		t.Fatal("a succeed without an image was accepted")
	}
	st, err = klingImage{}.Queried(200, []byte(`{"code":0,"data":{"task_status":"failed","task_status_msg":"Failure to pass the risk control system"}}`))
	if err != nil || st.Status != Failed || st.Error.Code != "generation_failed" || st.Error.Message != "Failure to pass the risk control system" {
		t.Fatalf("failed %+v %v", st, err)
	}
	if _, err := (klingImage{}).Queried(500, []byte(`{"code":5000,"message":"internal error"}`)); !errors.As(err, &te) || te.Code != "upstream_error" {
		t.Fatalf("a 5xx query: %v", err)
	}
	if _, err := (klingImage{}).Queried(200, []byte(`<html>`)); err == nil {
		t.Fatal("a non-JSON answer was read")
	}
	if _, err := (klingImage{}).Queried(200, []byte(`{"code":0,"data":{"task_status":"exploded"}}`)); err == nil {
		t.Fatal("an unknown status was read")
	}
}

// klingImageWords are what every I1 refusal names: a field, or the field list.
var klingImageWords = append([]string{"field", "callback_url"}, klingImageFields...)

func FuzzKlingImageValidate(f *testing.F) {
	f.Add(`{"prompt":"a fox","n":9,"aspect_ratio":"21:9","cfg_scale":0.5,"mode":"pro","duration":"10"}`)
	f.Add(`{"prompt":"a fox","n":0}`)
	f.Add(`{"prompt":"a fox","duration":5,"negative_prompt":null}`)
	f.Add(`{"prompt":"a fox","image":"https://x/a.png"}`)
	f.Fuzz(func(t *testing.T, body string) {
		var r provider.Request
		if json.Unmarshal([]byte(body), &r) != nil {
			return
		}
		tr, err := klingImage{}.Validate(&ir.Model{ID: "kling-image", Family: "I1"}, r)
		if err == nil {
			if tr.MaxImages < 1 || tr.MaxImages > klingMaxImages || tr.MaxSeconds != 0 {
				t.Fatalf("accepted %s with %d images", body, tr.MaxImages)
			}
			return
		}
		if !errors.Is(err, provider.ErrBadRequest) || fuzzcheck.Leak(err.Error()) != "" {
			t.Fatalf("%s: a refusal that is not the client's, or in Go's words: %v", body, err)
		}
		if !namesOne(err.Error(), klingImageWords) {
			t.Fatalf("%s: the refusal %q names no field", body, err)
		}
	})
}

func namesOne(msg string, words []string) bool {
	for _, w := range words {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}
