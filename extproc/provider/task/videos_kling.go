package task

// kling is family V3 (docs/media.md#video-families): Kling text-to-video. The provider's base_url
// is its API host root (https://api-singapore.klingai.com). Kling authenticates with a JWT the
// caller signs: HS256 over {iss: access key, exp: now+30 min, nbf: now-5 s} with the secret key,
// cached per provider until 5 minutes before it expires. A task is created with POST
// /v1/videos/text2video and queried with GET /v1/videos/text2video/{id}. Kling reads the model from
// model_name (a plain model field would be ignored: it would run kling-v1), and duration is a
// string. Errors carry a numeric code in an envelope {code, message, request_id, data}. The
// signing, the envelope and the V3 field checks are shared with I1 (images_kling.go).
//
// Fields are the spec's: prompt, cfg_scale, mode, duration, aspect_ratio (plus Kling's
// negative_prompt); the spec shows no image field for V3, so image-to-video is not offered.
// Allowed values (the spec shows none) are Kling's: prompt and negative_prompt up to 2500
// characters, cfg_scale 0 to 1, mode std or pro, duration "5" or "10", aspect_ratio 16:9, 9:16
// or 1:1. Other fields are refused with the list.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

type kling struct{}

var (
	klingFields  = []string{"prompt", "negative_prompt", "cfg_scale", "mode", "duration", "aspect_ratio"}
	klingRatios  = []string{"16:9", "9:16", "1:1"}
	klingModes   = []string{"std", "pro"}
	klingSeconds = []string{"5", "10"}
)

// klingResultLife is how long Kling keeps a generated video (it clears them after 30 days).
const klingResultLife = 30 * 24 * time.Hour

func (kling) Validate(m *ir.Model, req provider.Request) (Validated, error) {
	if err := onlyFields("V3", req, klingFields); err != nil {
		return Validated{}, err
	}
	if err := klingPrompts(req, "V3 is text-to-video"); err != nil {
		return Validated{}, err
	}
	if err := klingVideoParams("V3", req, klingRatios); err != nil {
		return Validated{}, err
	}
	dur := "5"
	if raw := provider.Field(req, "duration"); raw != nil {
		_ = json.Unmarshal(raw, &dur) // klingVideoParams checked it
	}
	secs, _ := strconv.ParseInt(dur, 10, 64)
	cb, _, err := stringOf(req, "callback_url")
	return Validated{MaxSeconds: secs, CallbackURL: cb}, err
}

// klingPrompts checks prompt (required: why says what the family makes) and negative_prompt,
// each up to 2500 characters, as Kling takes them.
func klingPrompts(req provider.Request, why string) error {
	prompt, _, err := stringOf(req, "prompt")
	if err != nil {
		return err
	}
	if prompt == "" {
		return fmt.Errorf("%w: prompt is required (%s)", provider.ErrBadRequest, why)
	}
	if n := len([]rune(prompt)); n > 2500 {
		return fmt.Errorf("%w: prompt is %d characters; Kling takes at most 2500", provider.ErrBadRequest, n)
	}
	neg, _, err := stringOf(req, "negative_prompt")
	if err != nil {
		return err
	}
	if n := len([]rune(neg)); n > 2500 {
		return fmt.Errorf("%w: negative_prompt is %d characters; Kling takes at most 2500", provider.ErrBadRequest, n)
	}
	return nil
}

// klingVideoParams checks the fields V3 defines and I1 shares (docs/media.md, V3 and I1) with
// Kling's video values: cfg_scale 0 to 1, mode std or pro, duration the string "5" or "10", and
// aspect_ratio one of ratios (the family's own list).
func klingVideoParams(family string, req provider.Request, ratios []string) error {
	if raw := provider.Field(req, "cfg_scale"); raw != nil {
		v, err := decimal.NewFromString(string(raw))
		switch {
		case err != nil:
			return provider.WrongType("cfg_scale", "a number from 0 to 1", raw)
		case v.IsNegative() || v.GreaterThan(decimal.NewFromInt(1)):
			return fmt.Errorf("%w: cfg_scale %s is not allowed: a number from 0 to 1", provider.ErrBadRequest, clip(string(raw)))
		}
	}
	for _, c := range []struct {
		field   string
		allowed []string
	}{{"mode", klingModes}, {"aspect_ratio", ratios}} {
		v, ok, err := stringOf(req, c.field)
		if err != nil {
			return err
		}
		if ok && !slices.Contains(c.allowed, v) {
			return fmt.Errorf("%w: %s %q is not allowed: use %s", provider.ErrBadRequest, c.field, clip(v), joinOr(c.allowed))
		}
	}
	if dur, ok, err := provider.ReadString("duration", provider.Field(req, "duration")); err != nil {
		return provider.WrongType("duration", `a string for `+family+`: "5" or "10"`, provider.Field(req, "duration"))
	} else if ok {
		if !slices.Contains(klingSeconds, dur) {
			return fmt.Errorf(`%w: duration %q is not allowed: use "5" or "10"`, provider.ErrBadRequest, clip(dur))
		}
	}
	return nil
}

func (kling) FormStrings() []string { return []string{"duration"} }

func (kling) Fields(*ir.Model) []string { return klingFields }

func (kling) Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	out := provider.Request{"model_name": mustJSON(model)}
	for _, f := range klingFields {
		if v := provider.Field(req, f); v != nil {
			out[f] = v
		}
	}
	h, err := klingHeaders(p)
	if err != nil {
		return nil, err
	}
	return &provider.Upstream{Path: "/v1/videos/text2video", Body: out.Encode(), Headers: h}, nil
}

func klingHeaders(p *ir.Provider) (map[string]string, error) {
	tok, err := klingTokens.get(p.AccessKey, p.SecretKey, time.Now())
	if err != nil {
		return nil, fmt.Errorf("kling: sign the request: %w", err)
	}
	return bearer(tok), nil
}

// klingJWT caches one signed token per key pair until 5 minutes before it expires.
type klingJWT struct {
	mu     sync.Mutex
	tokens map[string]cachedToken
}

type cachedToken struct {
	token   string
	renewAt time.Time
}

var klingTokens = &klingJWT{tokens: map[string]cachedToken{}}

const (
	klingTokenLife  = 30 * time.Minute
	klingTokenRenew = 5 * time.Minute
)

func (c *klingJWT) get(access, secret string, now time.Time) (string, error) {
	if access == "" || secret == "" {
		return "", fmt.Errorf("the provider has no access_key and secret_key")
	}
	key := access + "\x00" + secret
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.tokens[key]; ok && now.Before(t.renewAt) {
		return t.token, nil
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Issuer:    access,
		ExpiresAt: jwt.NewNumericDate(now.Add(klingTokenLife)),
		NotBefore: jwt.NewNumericDate(now.Add(-5 * time.Second)),
	}).SignedString([]byte(secret))
	if err != nil {
		return "", err
	}
	if len(c.tokens) > 1024 {
		clear(c.tokens) // key pairs come from config: a bound, never reached in practice
	}
	c.tokens[key] = cachedToken{token: tok, renewAt: now.Add(klingTokenLife - klingTokenRenew)}
	return tok, nil
}

// klingEnvelope is every Kling answer.
type klingEnvelope struct {
	Code    *int   `json:"code"`
	Message string `json:"message"`
	Data    struct {
		TaskID        string `json:"task_id"`
		TaskStatus    string `json:"task_status"`
		TaskStatusMsg string `json:"task_status_msg"`
		TaskResult    struct {
			Videos []struct {
				URL      string `json:"url"`
				Duration string `json:"duration"`
			} `json:"videos"`
			Images []struct {
				Index int    `json:"index"`
				URL   string `json:"url"`
			} `json:"images"`
		} `json:"task_result"`
	} `json:"data"`
}

func (e klingEnvelope) failure(status int) error {
	if status == http.StatusOK && e.Code != nil && *e.Code == 0 {
		return nil
	}
	c := -1
	if e.Code != nil {
		c = *e.Code
	}
	code := httpCode(status)
	switch {
	case c >= 1000 && c < 1100:
		code = "provider_auth_failed"
	case c >= 1100 && c < 1200:
		code = "provider_balance"
	case c >= 1200 && c < 1300:
		code = "invalid_request"
	case c == 1301:
		code = "content_filter"
	case c >= 1302 && c < 1400:
		code = "provider_rate_limited"
	}
	return &Error{Code: code, Message: fmt.Sprintf("Kling HTTP %d code %d: %s", status, c, e.Message)}
}

func (kling) Created(status int, body []byte) (Created, error) {
	var e klingEnvelope
	if err := json.Unmarshal(body, &e); err != nil && status == http.StatusOK {
		return Created{}, fmt.Errorf("Kling's create answer is not JSON")
	}
	if err := e.failure(status); err != nil {
		return Created{}, err
	}
	if e.Data.TaskID == "" {
		return Created{}, &Error{Code: "upstream_error", Message: "Kling accepted the task without a task_id"}
	}
	return Created{TaskID: e.Data.TaskID}, nil
}

func (kling) Query(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	h, err := klingHeaders(p)
	if err != nil {
		return nil, err
	}
	return &provider.Upstream{Method: http.MethodGet, Path: "/v1/videos/text2video/" + url.PathEscape(id), Headers: h}, nil
}

func (kling) Queried(status int, body []byte) (State, error) {
	e, st, err := klingQueried(status, body, "video")
	if err != nil || st.Status != Completed {
		return st, err
	}
	for _, v := range e.Data.TaskResult.Videos {
		secs, _ := decimal.NewFromString(v.Duration)
		st.Videos = append(st.Videos, Video{URL: v.URL, Seconds: secs, ExpiresAt: time.Now().Add(klingResultLife)})
	}
	if len(st.Videos) == 0 {
		return State{}, fmt.Errorf("Kling reported succeed without a video")
	}
	return st, nil
}

// klingUnknownTask is Kling's code for a task id it does not know (HTTP 404).
const klingUnknownTask = 1203

// klingQueried reads a task answer's envelope and maps its status; the caller adds the
// results of a succeed (what names them in messages: video, image). An unknown task id is
// ErrUnknown.
func klingQueried(status int, body []byte, what string) (klingEnvelope, State, error) {
	var e klingEnvelope
	if err := json.Unmarshal(body, &e); err != nil && status == http.StatusOK {
		return e, State{}, fmt.Errorf("Kling's task answer is not JSON")
	}
	if status == http.StatusNotFound && e.Code != nil && *e.Code == klingUnknownTask {
		return e, State{FamilyStatus: "not found"}, fmt.Errorf("%w: Kling HTTP 404 code %d (it keeps results 30 days): %s", ErrUnknown, klingUnknownTask, clip(e.Message))
	}
	if err := e.failure(status); err != nil {
		return e, State{}, err
	}
	st := State{FamilyStatus: e.Data.TaskStatus}
	switch e.Data.TaskStatus {
	case "submitted":
		st.Status = Queued
	case "processing":
		st.Status = InProgress
	case "succeed":
		st.Status = Completed
	case "failed":
		st.Status = Failed
		st.Error = &Error{Code: "generation_failed", Message: cmp.Or(e.Data.TaskStatusMsg, "Kling could not generate the "+what)}
	default:
		return e, State{}, fmt.Errorf("Kling reported an unknown task_status %q", clip(e.Data.TaskStatus))
	}
	return e, st, nil
}

func (kling) Followed(*State, int, []byte) error { return nil }
