package task

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/test/fuzzcheck"
	"github.com/tollway/tollway/xds/ir"
)

// TestKlingValidation: V3's fields and values, each refusal naming the field and what is allowed.
func TestKlingValidation(t *testing.T) {
	m := &ir.Model{ID: "kling-2", Family: "V3"}
	for body, want := range map[string]string{
		`{"prompt":"a fox"}`: "max 5",
		`{"prompt":"a fox","duration":"10","mode":"pro","aspect_ratio":"9:16","cfg_scale":0.5,"negative_prompt":"blur"}`: "max 10",
		`{"prompt":"a fox","duration":10}`:         `duration must be a string for V3: "5" or "10"`,
		`{"prompt":"a fox","duration":"7"}`:        `duration "7" is not allowed`,
		`{"prompt":"a fox","cfg_scale":1.5}`:       "cfg_scale 1.5 is not allowed: a number from 0 to 1",
		`{"prompt":"a fox","mode":"ultra"}`:        `mode "ultra" is not allowed: use std or pro`,
		`{"prompt":"a fox","aspect_ratio":"4:3"}`:  `aspect_ratio "4:3" is not allowed: use 16:9, 9:16 or 1:1`,
		`{"duration":"5"}`:                         "prompt is required",
		`{"prompt":"a fox","image":"https://x/a"}`: `does not take field "image"`,
	} {
		tr, err := kling{}.Validate(m, taskReq(t, body))
		switch {
		case strings.HasPrefix(want, "max "):
			if err != nil || "max "+itoa(tr.MaxSeconds) != want {
				t.Errorf("%s: %v, max %d; want %s", body, err, tr.MaxSeconds, want)
			}
		case err == nil || !errors.Is(err, provider.ErrBadRequest) || !strings.Contains(err.Error(), want):
			t.Errorf("%s: %v; want %q", body, err, want)
		}
	}
}

// TestKlingSignsAndRenames: the create carries model_name (Kling ignores model), never the
// gateway's fields, and a JWT HS256 {iss, exp in 30 min, nbf 5 s back} signed with the secret
// key, reused until 5 minutes before it expires.
func TestKlingSignsAndRenames(t *testing.T) {
	p := &ir.Provider{Name: "kling", AccessKey: "ak-1", SecretKey: "sk-1"}
	up, err := kling{}.Create(p, &ir.Model{}, "kling-v2-master", taskReq(t, `{"model":"kling-2","prompt":"a fox","duration":"5","callback_url":"https://h/x"}`))
	if err != nil || up.Path != "/v1/videos/text2video" || string(up.Body) != `{"duration":"5","model_name":"kling-v2-master","prompt":"a fox"}` {
		t.Fatalf("create %+v %s %v", up, up.Body, err)
	}
	raw := strings.TrimPrefix(up.Headers["authorization"], "Bearer ")
	claims := jwt.RegisteredClaims{}
	if _, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return []byte("sk-1"), nil }, jwt.WithValidMethods([]string{"HS256"})); err != nil {
		t.Fatalf("token %q: %v", raw, err)
	}
	if claims.Issuer != "ak-1" || time.Until(claims.ExpiresAt.Time) < 29*time.Minute || time.Until(claims.NotBefore.Time) > -4*time.Second {
		t.Fatalf("claims %+v", claims)
	}
	c := &klingJWT{tokens: map[string]cachedToken{}}
	now := time.Now()
	a, _ := c.get("ak", "sk", now)
	b, _ := c.get("ak", "sk", now.Add(24*time.Minute))
	d, _ := c.get("ak", "sk", now.Add(26*time.Minute))
	if a != b || a == d {
		t.Fatalf("cache: reused %v, renewed %v", a == b, a != d)
	}
	if _, err := c.get("", "sk", now); err == nil {
		t.Fatal("signed without an access key")
	}
}

// TestKlingAnswers: the envelope's numeric codes, statuses, and durations as strings.
func TestKlingAnswers(t *testing.T) {
	if id, err := (kling{}).Created(200, []byte(`{"code":0,"message":"SUCCEED","request_id":"r","data":{"task_id":"786","task_status":"submitted"}}`)); err != nil || id.TaskID != "786" {
		t.Fatalf("created %+v %v", id, err)
	}
	var te *Error
	for body, want := range map[string]string{
		`{"code":1004,"message":"Authorization is expired"}`:   "provider_auth_failed",
		`{"code":1102,"message":"Account balance not enough"}`: "provider_balance",
		`{"code":1301,"message":"risk control"}`:               "content_filter",
		`{"code":1302,"message":"too many requests"}`:          "provider_rate_limited",
	} {
		if _, err := (kling{}).Created(400, []byte(body)); !errors.As(err, &te) || te.Code != want {
			t.Errorf("%s: %v, want %s", body, err, want)
		}
	}
	st, err := kling{}.Queried(200, []byte(`{"code":0,"data":{"task_id":"786","task_status":"succeed","task_result":{"videos":[{"id":"v","url":"https://cdn.kling.example/a.mp4","duration":"5.1"}]}}}`))
	if err != nil || st.Status != Completed || st.Videos[0].Seconds.String() != "5.1" {
		t.Fatalf("succeed %+v %v", st, err)
	}
	st, err = kling{}.Queried(200, []byte(`{"code":0,"data":{"task_status":"failed","task_status_msg":"risk control"}}`))
	if err != nil || st.Status != Failed || st.Error.Message != "risk control" {
		t.Fatalf("failed %+v %v", st, err)
	}
}

func FuzzValidateKling(f *testing.F) {
	f.Add(`{"prompt":"a fox","duration":"10","mode":"pro","cfg_scale":0.5}`)
	f.Fuzz(func(t *testing.T, body string) {
		var r provider.Request
		if jsonUnmarshalRequest(body, &r) != nil {
			return
		}
		tr, err := kling{}.Validate(&ir.Model{Family: "V3"}, r)
		if err == nil && tr.MaxSeconds != 5 && tr.MaxSeconds != 10 {
			t.Fatalf("accepted %s with max %d", body, tr.MaxSeconds)
		}
		if err != nil && (!errors.Is(err, provider.ErrBadRequest) || fuzzcheck.Leak(err.Error()) != "") {
			t.Fatalf("%s: a refusal that is not the client's, or in Go's words: %v", body, err)
		}
	})
}
