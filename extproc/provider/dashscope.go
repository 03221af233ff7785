package provider

// dashscope is family V2 (spec 4.3): Alibaba Model Studio (DashScope) Wan video generation, in
// two variants: t2v (text-to-video: input.prompt) and i2v (image-to-video: a first frame in
// input.media). The provider's base_url is its API host root (https://dashscope-intl.aliyuncs.com).
// A task is created with POST /api/v1/services/aigc/video-generation/video-synthesis and the
// header X-DashScope-Async: enable (DashScope refuses the call without it), and queried with GET
// /api/v1/tasks/{id}. Results are kept 24 h after the task ends; UNKNOWN means an unknown or
// expired task id. Times (end_time) are Beijing time without a zone; a result URL's expiry is the
// Expires of its OSS signature when it carries one (resultExpiry).
//
// The body is the spec's: model, input {prompt, media [{type: first_frame, url}]} and
// parameters {resolution, ratio, duration, watermark, seed}; other fields are refused with the
// list. The duration range of the i2v variant is not in the spec: it takes the t2v range.

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

	"github.com/tollway/tollway/xds/ir"
)

type dashscope struct{}

func init() { RegisterTask("V2", dashscope{}) }

var (
	dashscopeRatios      = []string{"16:9", "9:16", "1:1", "4:3", "3:4", "4:5", "5:4", "9:21", "21:9"}
	dashscopeResolutions = []string{"720P", "1080P"}
)

// dashscopeResultLife is how long DashScope keeps a finished task's video.
const dashscopeResultLife = 24 * time.Hour

type dashscopeBody struct {
	// The gateway's own fields, read elsewhere.
	Model       json.RawMessage `json:"model"`
	Route       json.RawMessage `json:"route"`
	RouteMode   json.RawMessage `json:"route_mode"`
	CallbackURL json.RawMessage `json:"callback_url"`
	Input       *struct {
		Prompt *string `json:"prompt"`
		Media  []struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"media"`
	} `json:"input"`
	Parameters *struct {
		Resolution *string `json:"resolution"`
		Ratio      *string `json:"ratio"`
		Duration   *int64  `json:"duration"`
		Watermark  *bool   `json:"watermark"`
		Seed       *int64  `json:"seed"`
	} `json:"parameters"`
}

func (dashscope) Validate(m *ir.Model, req Request) (TaskRequest, error) {
	if err := onlyFields("V2", req, []string{"input", "parameters"}); err != nil {
		return TaskRequest{}, err
	}
	var b dashscopeBody
	dec := json.NewDecoder(strings.NewReader(string(req.Encode())))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return TaskRequest{}, fmt.Errorf("%w: V2 takes input {prompt, media [{type, url}]} and parameters {resolution, ratio, duration, watermark, seed}: %s",
			ErrBadRequest, strings.TrimPrefix(err.Error(), "json: "))
	}
	prompt := ""
	if b.Input != nil && b.Input.Prompt != nil {
		prompt = *b.Input.Prompt
	}
	frames := 0
	if b.Input != nil {
		for i, md := range b.Input.Media {
			if md.Type != "first_frame" {
				return TaskRequest{}, fmt.Errorf("%w: input.media[%d].type %q is not allowed: use first_frame", ErrBadRequest, i, clipText(md.Type))
			}
			if !strings.HasPrefix(md.URL, "https://") && !strings.HasPrefix(md.URL, "http://") && !strings.HasPrefix(md.URL, "data:") {
				return TaskRequest{}, fmt.Errorf("%w: input.media[%d].url must be an image URL or a data URL", ErrBadRequest, i)
			}
			frames++
		}
	}
	switch m.Variant {
	case "t2v":
		if prompt == "" {
			return TaskRequest{}, fmt.Errorf("%w: input.prompt is required: %s is a text-to-video model", ErrBadRequest, m.ID)
		}
		if frames > 0 {
			return TaskRequest{}, fmt.Errorf("%w: input.media is for image-to-video: %s is a text-to-video model; choose an i2v model", ErrBadRequest, m.ID)
		}
	case "i2v":
		if frames != 1 {
			return TaskRequest{}, fmt.Errorf("%w: input.media needs one {type: first_frame, url}: %s is an image-to-video model", ErrBadRequest, m.ID)
		}
	}
	dur := int64(5)
	if p := b.Parameters; p != nil {
		if p.Resolution != nil && !slices.Contains(dashscopeResolutions, *p.Resolution) {
			return TaskRequest{}, fmt.Errorf("%w: parameters.resolution %q is not allowed: use 720P or 1080P", ErrBadRequest, clipText(*p.Resolution))
		}
		if p.Ratio != nil && !slices.Contains(dashscopeRatios, *p.Ratio) {
			return TaskRequest{}, fmt.Errorf("%w: parameters.ratio %q is not allowed: use one of %s", ErrBadRequest, clipText(*p.Ratio), strings.Join(dashscopeRatios, ", "))
		}
		if p.Seed != nil && (*p.Seed < 0 || *p.Seed > 2147483647) {
			return TaskRequest{}, fmt.Errorf("%w: parameters.seed %d is out of range: 0 to 2147483647", ErrBadRequest, *p.Seed)
		}
		if p.Duration != nil {
			dur = *p.Duration
		}
	}
	if dur < 3 || dur > 15 {
		return TaskRequest{}, fmt.Errorf("%w: parameters.duration %d is out of range: 3 to 15 seconds", ErrBadRequest, dur)
	}
	cb, _, err := stringOf(req, "callback_url")
	return TaskRequest{MaxSeconds: dur, CallbackURL: cb}, err
}

func (dashscope) Create(p *ir.Provider, m *ir.Model, model string, req Request) (*Upstream, error) {
	out := Request{"model": mustJSON(model)}
	for _, f := range []string{"input", "parameters"} {
		if v := rawField(req, f); v != nil {
			out[f] = v
		}
	}
	h := bearer(p.APIKey)
	h["x-dashscope-async"] = "enable"
	return &Upstream{Path: "/api/v1/services/aigc/video-generation/video-synthesis", Body: out.Encode(), Headers: h}, nil
}

// dashscopeError is DashScope's error envelope (HTTP 4xx/5xx).
type dashscopeError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e dashscopeError) failure(status int) error {
	code := httpCode(status)
	switch {
	case e.Code == "DataInspectionFailed":
		code = "content_filter"
	case strings.HasPrefix(e.Code, "Throttling"):
		code = "provider_rate_limited"
	}
	return &TaskError{Code: code, Message: fmt.Sprintf("DashScope HTTP %d %s: %s", status, e.Code, e.Message)}
}

func (dashscope) Created(status int, body []byte) (Created, error) {
	var a struct {
		dashscopeError
		Output struct {
			TaskID string `json:"task_id"`
		} `json:"output"`
	}
	_ = json.Unmarshal(body, &a)
	if status != http.StatusOK {
		return Created{}, a.failure(status)
	}
	if a.Output.TaskID == "" {
		return Created{}, &TaskError{Code: "upstream_error", Message: "DashScope accepted the task without a task_id"}
	}
	return Created{TaskID: a.Output.TaskID}, nil
}

func (dashscope) Query(p *ir.Provider, m *ir.Model, id string) (*Upstream, error) {
	return &Upstream{Method: http.MethodGet, Path: "/api/v1/tasks/" + url.PathEscape(id), Headers: bearer(p.APIKey)}, nil
}

// Cancel is DashScope's cancel of an asynchronous task, which it accepts while the task is
// PENDING (POST /api/v1/tasks/{task_id}/cancel).
func (dashscope) Cancel(p *ir.Provider, m *ir.Model, id string) (*Upstream, error) {
	return &Upstream{Method: http.MethodPost, Path: "/api/v1/tasks/" + url.PathEscape(id) + "/cancel", Headers: bearer(p.APIKey)}, nil
}

func (dashscope) Queried(status int, body []byte) (TaskState, error) {
	var a struct {
		dashscopeError
		Output struct {
			Status   string `json:"task_status"`
			VideoURL string `json:"video_url"`
			EndTime  string `json:"end_time"`
			Code     string `json:"code"`
			Message  string `json:"message"`
		} `json:"output"`
		Usage struct {
			Duration json.Number `json:"duration"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &a); err != nil && status == http.StatusOK {
		return TaskState{}, fmt.Errorf("DashScope's task answer is not JSON")
	}
	if status != http.StatusOK {
		return TaskState{}, a.failure(status)
	}
	st := TaskState{FamilyStatus: a.Output.Status}
	switch a.Output.Status {
	case "PENDING":
		st.Status = TaskQueued
	case "RUNNING":
		st.Status = TaskInProgress
	case "SUCCEEDED":
		if a.Output.VideoURL == "" {
			return TaskState{}, fmt.Errorf("DashScope reported SUCCEEDED without a video_url")
		}
		st.Status = TaskCompleted
		st.Videos = []TaskVideo{{URL: a.Output.VideoURL, ExpiresAt: resultExpiry(a.Output.VideoURL, dashscopeTime(a.Output.EndTime))}}
		if d, err := decimal.NewFromString(a.Usage.Duration.String()); err == nil && d.IsPositive() {
			st.BilledSeconds, st.Videos[0].Seconds = d, d
		}
	case "FAILED", "CANCELED":
		st.Status = TaskFailed
		st.Error = &TaskError{Code: cmp.Or(strings.ToLower(a.Output.Code), "generation_failed"), Message: cmp.Or(a.Output.Message, "DashScope reported "+a.Output.Status)}
	case "UNKNOWN":
		return st, errDashScopeUnknown
	default:
		return TaskState{}, fmt.Errorf("DashScope reported an unknown task_status %q", clipText(a.Output.Status))
	}
	return st, nil
}

func (dashscope) Followed(*TaskState, int, []byte) error { return nil }

// errDashScopeUnknown is DashScope's task_status UNKNOWN (HTTP 200): an id it never issued, or
// a task past its 24 h retention.
var errDashScopeUnknown = fmt.Errorf("%w: DashScope answered task_status UNKNOWN (an unknown id, or a task past its 24 h retention)", ErrTaskUnknown)

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
