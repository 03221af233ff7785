package task

// dashscopeVideo is family V2 (docs/media.md#video-families): Alibaba Model Studio (DashScope) Wan
// video generation, in two variants: t2v (text-to-video: input.prompt) and i2v (image-to-video: a
// first frame in input.media). The provider's base_url is its API host root
// (https://dashscope-intl.aliyuncs.com). A task is created with POST
// /api/v1/services/aigc/video-generation/video-synthesis and the header X-DashScope-Async: enable
// (DashScope refuses the call without it), and queried with GET /api/v1/tasks/{id}. Results are
// kept 24 h after the task ends; UNKNOWN means an unknown or expired task id. Times (end_time) are
// Beijing time without a zone; a result URL's expiry is the Expires of its OSS signature when it
// carries one (resultExpiry).
//
// The body is the spec's: model, input {prompt, media [{type: first_frame, url}]} and
// parameters {resolution, ratio, duration, watermark, seed}; other fields are refused with the
// list. A top-level prompt, which the OpenAI SDKs' videos.create requires, is sent as
// input.prompt when input has none (the two may not differ). A media url is an http or https
// URL (DashScope fetches it) or a data URL. The duration range of the i2v variant is not in the
// spec: it takes the t2v range.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/apischema/dashscope"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

type dashscopeVideo struct{}

var (
	dashscopeRatios      = []string{"16:9", "9:16", "1:1", "4:3", "3:4", "4:5", "5:4", "9:21", "21:9"}
	dashscopeResolutions = []string{"720P", "1080P"}
)

// dashscopeResultLife is how long DashScope keeps a finished task's video.
const dashscopeResultLife = 24 * time.Hour

// The V2 body, declared once: Validate refuses any other field naming these lists, and Fields
// lists them for the catalog. The top-level prompt is the OpenAI SDKs' (videos.create requires
// one): it is read as input.prompt when input has none.
var (
	v2Fields      = []string{"prompt", "input", "parameters"}
	v2InputFields = []string{"prompt", "media"}
	v2MediaFields = []string{"type", "url"}
	v2ParamFields = []string{"resolution", "ratio", "duration", "watermark", "seed"}
)

func (dashscopeVideo) Fields(*ir.Model) []string {
	out := []string{"prompt"}
	for _, f := range v2InputFields {
		out = append(out, "input."+f)
	}
	for _, f := range v2ParamFields {
		out = append(out, "parameters."+f)
	}
	return out
}

func (dashscopeVideo) Validate(m *ir.Model, req provider.Request) (Validated, error) {
	if err := onlyFields("V2", req, v2Fields); err != nil {
		return Validated{}, err
	}
	prompt, frames, err := v2Input(req)
	if err != nil {
		return Validated{}, err
	}
	switch m.Variant {
	case "t2v":
		if prompt == "" {
			return Validated{}, fmt.Errorf("%w: input.prompt is required (or prompt, as the OpenAI SDKs send it): %s is a text-to-video model", provider.ErrBadRequest, m.ID)
		}
		if frames > 0 {
			return Validated{}, fmt.Errorf("%w: input.media is for image-to-video: %s is a text-to-video model; choose an i2v model", provider.ErrBadRequest, m.ID)
		}
	case "i2v":
		if frames != 1 {
			return Validated{}, fmt.Errorf("%w: input.media needs one {type: first_frame, url}: %s is an image-to-video model", provider.ErrBadRequest, m.ID)
		}
	}
	dur, err := v2Parameters(provider.Field(req, "parameters"))
	if err != nil {
		return Validated{}, err
	}
	cb, _, err := stringOf(req, "callback_url")
	return Validated{MaxSeconds: dur, CallbackURL: cb}, err
}

// v2Input reads the prompt (input.prompt, else the top-level prompt; the two may not differ)
// and checks input.media's first frames, returning how many there are.
func v2Input(req provider.Request) (prompt string, frames int, err error) {
	top, _, err := stringOf(req, "prompt")
	if err != nil {
		return "", 0, err
	}
	in, err := dsObject("input", provider.Field(req, "input"), v2InputFields)
	if err != nil {
		return "", 0, err
	}
	inner, has, err := provider.ReadString("input.prompt", provider.Field(in, "prompt"))
	switch {
	case err != nil:
		return "", 0, err
	case has && top != "" && top != inner:
		return "", 0, fmt.Errorf("%w: prompt %q and input.prompt %q differ: send one of them (V2 reads a top-level prompt, as the OpenAI SDKs send it, as input.prompt)",
			provider.ErrBadRequest, clip(top), clip(inner))
	case !has:
		inner = top
	}
	media := provider.Field(in, "media")
	if media == nil {
		return inner, 0, nil
	}
	items, err := provider.Array("input.media", media, "an array of {type, url}")
	if err != nil {
		return "", 0, err
	}
	for i, item := range items {
		field := fmt.Sprintf("input.media[%d]", i)
		md, err := dsObject(field, item, v2MediaFields)
		if err != nil {
			return "", 0, err
		}
		typ, _, err := provider.ReadString(field+".type", provider.Field(md, "type"))
		if err != nil {
			return "", 0, err
		}
		if typ != "first_frame" {
			return "", 0, fmt.Errorf("%w: %s.type %q is not allowed: use first_frame", provider.ErrBadRequest, field, clip(typ))
		}
		u, ok, err := provider.ReadString(field+".url", provider.Field(md, "url"))
		if err == nil && !ok {
			err = fmt.Errorf("%w: %s.url is required: the first frame's image URL or base64 data URL", provider.ErrBadRequest, field)
		}
		if err == nil {
			_, _, err = provider.ImageData(field+".url", u)
		}
		if err != nil {
			return "", 0, err
		}
	}
	return inner, len(items), nil
}

// v2Parameters checks parameters and returns the video's duration.
func v2Parameters(raw json.RawMessage) (int64, error) {
	p, err := dsObject("parameters", raw, v2ParamFields)
	if err != nil {
		return 0, err
	}
	if v, ok, err := provider.ReadString("parameters.resolution", provider.Field(p, "resolution")); err != nil {
		return 0, err
	} else if ok && !slices.Contains(dashscopeResolutions, v) {
		return 0, fmt.Errorf("%w: parameters.resolution %q is not allowed: use %s", provider.ErrBadRequest, clip(v), joinOr(dashscopeResolutions))
	}
	if v, ok, err := provider.ReadString("parameters.ratio", provider.Field(p, "ratio")); err != nil {
		return 0, err
	} else if ok && !slices.Contains(dashscopeRatios, v) {
		return 0, fmt.Errorf("%w: parameters.ratio %q is not allowed: use one of %s", provider.ErrBadRequest, clip(v), strings.Join(dashscopeRatios, ", "))
	}
	if _, _, err := provider.ReadBool("parameters.watermark", provider.Field(p, "watermark")); err != nil {
		return 0, err
	}
	if seed, ok, err := provider.ReadInt("parameters.seed", provider.Field(p, "seed")); err != nil {
		return 0, err
	} else if ok && (seed < 0 || seed > maxSeed) {
		return 0, fmt.Errorf("%w: parameters.seed %d is out of range: 0 to %d", provider.ErrBadRequest, seed, maxSeed)
	}
	dur, ok, err := provider.ReadInt("parameters.duration", provider.Field(p, "duration"))
	if err != nil {
		return 0, err
	}
	if !ok {
		dur = 5
	}
	if dur < 3 || dur > 15 {
		return 0, fmt.Errorf("%w: parameters.duration %d is out of range: 3 to 15 seconds", provider.ErrBadRequest, dur)
	}
	return dur, nil
}

func (dashscopeVideo) Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	out := provider.Request{"model": mustJSON(model)}
	if v := provider.Field(req, "parameters"); v != nil {
		out["parameters"] = v
	}
	in, err := v2SentInput(req)
	if err != nil {
		return nil, err
	}
	if in != nil {
		out["input"] = in
	}
	h := bearer(p.APIKey)
	h["x-dashscope-async"] = "enable"
	return &provider.Upstream{Path: "/api/v1/services/aigc/video-generation/video-synthesis", Body: out.Encode(), Headers: h}, nil
}

// v2SentInput is input as DashScope takes it: a validated body's top-level prompt becomes
// input.prompt when input has none (DashScope reads no top-level prompt).
func v2SentInput(req provider.Request) (json.RawMessage, error) {
	in := provider.Field(req, "input")
	top, _, _ := stringOf(req, "prompt")
	if top == "" {
		return in, nil
	}
	obj := provider.Request{}
	if in != nil {
		var err error
		if obj, err = provider.ParseRequest(in); err != nil {
			return nil, fmt.Errorf("%w: input must be an object", provider.ErrBadRequest)
		}
	}
	if provider.Field(obj, "prompt") != nil {
		return in, nil // the same prompt (Validate refuses two)
	}
	obj["prompt"] = mustJSON(top)
	return obj.Encode(), nil
}

// dashscopeFailure is the task error of DashScope's error answer e with HTTP status.
func dashscopeFailure(e dashscope.Error, status int) error {
	code := httpCode(status)
	switch {
	case e.Code == "DataInspectionFailed":
		code = "content_filter"
	case strings.HasPrefix(e.Code, "Throttling"):
		code = "provider_rate_limited"
	}
	return &Error{Code: code, Message: fmt.Sprintf("DashScope HTTP %d %s: %s", status, e.Code, e.Message)}
}

func (dashscopeVideo) Created(status int, body []byte) (Created, error) {
	var a dashscope.Answer
	_ = json.Unmarshal(body, &a)
	if status != http.StatusOK {
		return Created{}, dashscopeFailure(a.Error, status)
	}
	if a.Output.TaskID == "" {
		return Created{}, &Error{Code: "upstream_error", Message: "DashScope accepted the task without a task_id"}
	}
	return Created{TaskID: a.Output.TaskID}, nil
}

func (dashscopeVideo) Query(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	return &provider.Upstream{Method: http.MethodGet, Path: "/api/v1/tasks/" + url.PathEscape(id), Headers: bearer(p.APIKey)}, nil
}

// Cancel is DashScope's cancel of an asynchronous task, which it accepts while the task is
// PENDING (POST /api/v1/tasks/{task_id}/cancel).
func (dashscopeVideo) Cancel(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	return &provider.Upstream{Method: http.MethodPost, Path: "/api/v1/tasks/" + url.PathEscape(id) + "/cancel", Headers: bearer(p.APIKey)}, nil
}

func (dashscopeVideo) Queried(status int, body []byte) (State, error) {
	a, st, err := dashscopeQueried(status, body, false)
	if err != nil || st.Status != Completed {
		return st, err
	}
	if a.Output.VideoURL == "" {
		return State{}, fmt.Errorf("DashScope reported SUCCEEDED without a video_url")
	}
	st.Videos = []Video{{URL: a.Output.VideoURL, ExpiresAt: resultExpiry(a.Output.VideoURL, dashscopeTime(a.Output.EndTime))}}
	if d, err := decimal.NewFromString(a.Usage.Duration.String()); err == nil && d.IsPositive() {
		st.BilledSeconds, st.Videos[0].Seconds = d, d
	}
	return st, nil
}

// dashscopeQueried reads a task answer and maps its status; the caller adds the results of a
// SUCCEEDED. inspected: a failure by content inspection (DataInspection...) is content_filter
// (image tasks); otherwise a failure's code is DashScope's, in lower case.
func dashscopeQueried(status int, body []byte, inspected bool) (dashscope.Answer, State, error) {
	var a dashscope.Answer
	if err := json.Unmarshal(body, &a); err != nil && status == http.StatusOK {
		return a, State{}, fmt.Errorf("DashScope's task answer is not JSON")
	}
	if status != http.StatusOK {
		return a, State{}, dashscopeFailure(a.Error, status)
	}
	st := State{FamilyStatus: a.Output.Status}
	switch a.Output.Status {
	case "PENDING":
		st.Status = Queued
	case "RUNNING":
		st.Status = InProgress
	case "SUCCEEDED":
		st.Status = Completed
	case "FAILED", "CANCELED":
		code := strings.ToLower(a.Output.Code)
		if inspected && strings.HasPrefix(a.Output.Code, "DataInspection") {
			code = "content_filter"
		}
		st.Status = Failed
		st.Error = &Error{Code: cmp.Or(code, "generation_failed"), Message: cmp.Or(a.Output.Message, "DashScope reported "+a.Output.Status)}
	case "UNKNOWN":
		return a, st, errDashScopeUnknown
	default:
		return a, State{}, fmt.Errorf("DashScope reported an unknown task_status %q", clip(a.Output.Status))
	}
	return a, st, nil
}

func (dashscopeVideo) Followed(*State, int, []byte) error { return nil }

// errDashScopeUnknown is DashScope's task_status UNKNOWN (HTTP 200): an id it never issued, or
// a task past its 24 h retention.
var errDashScopeUnknown = fmt.Errorf("%w: DashScope answered task_status UNKNOWN (an unknown id, or a task past its 24 h retention)", ErrUnknown)

// beijing is the zone of DashScope's times (submit_time, end_time): UTC+8 without DST, written
// without a zone.
var beijing = time.FixedZone("UTC+8", 8*60*60)

// dashscopeTime reads a DashScope time ("2025-02-20 18:45:52.262", Beijing time); now when it
// is missing or unreadable.
func dashscopeTime(s string) time.Time {
	// The layout has no fraction: Go reads one after the seconds all the same.
	t, err := time.ParseInLocation(time.DateTime, s, beijing)
	if err != nil {
		return time.Now()
	}
	return t
}
