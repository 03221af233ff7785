package task

// minimax is family V1 (docs/media.md#video-families): MiniMax Hailuo video generation. The
// provider's base_url is its API host root (https://api.minimax.io). A task is created with POST
// /v1/video_generation, queried with GET /v1/query/video_generation?task_id=, and its video found
// with GET /v1/files/retrieve?file_id= (the download URL lives 1 hour: MiniMax documents a
// short-lived URL; the gateway reports that expiry). Errors come inside HTTP 200, in base_resp.
//
// Fields are the spec's (prompt, first_frame_image, prompt_optimizer, fast_pretreatment,
// duration, resolution, aigc_watermark) and pass as they are (first_frame_image an http or
// https URL, which MiniMax fetches, or a data URL); any other field is refused with
// the list, the gateway's own (model, route, route_mode, callback_url) are not sent: the
// gateway delivers callbacks itself.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

type minimax struct{}

var minimaxFields = []string{"prompt", "first_frame_image", "prompt_optimizer", "fast_pretreatment", "duration", "resolution", "aigc_watermark"}

// minimaxURLLife is how long a MiniMax download URL works.
const minimaxURLLife = time.Hour

// minimaxFrame are V1's first-frame limits (docs/media.md#video-families): below 20 MB, short side
// above 300 px, aspect 2:5 to 5:2.
var minimaxFrame = provider.ImageRules{MaxBytes: 20 << 20, Below: true, MinShort: 300, MinAspect: [2]int{2, 5}, MaxAspect: [2]int{5, 2},
	Formats: []string{"jpeg", "png", "webp"}, FormatNames: "JPG, JPEG, PNG or WebP"}

func (minimax) Validate(m *ir.Model, req provider.Request) (Validated, error) {
	if err := onlyFields("V1", req, minimaxFields); err != nil {
		return Validated{}, err
	}
	prompt, hasPrompt, err := stringOf(req, "prompt")
	if err != nil {
		return Validated{}, err
	}
	if n := len([]rune(prompt)); n > 2000 {
		return Validated{}, fmt.Errorf("%w: prompt is %d characters; V1 takes at most 2000", provider.ErrBadRequest, n)
	}
	frame, hasFrame, err := stringOf(req, "first_frame_image")
	if err != nil {
		return Validated{}, err
	}
	if !hasFrame && (!hasPrompt || prompt == "") {
		return Validated{}, fmt.Errorf("%w: send a prompt (text-to-video) or a first_frame_image (image-to-video)", provider.ErrBadRequest)
	}
	if hasFrame {
		if err := provider.CheckImage("first_frame_image", frame, minimaxFrame); err != nil {
			return Validated{}, err
		}
	}
	for _, f := range []string{"prompt_optimizer", "fast_pretreatment", "aigc_watermark"} {
		if _, _, err := provider.ReadBool(f, provider.Field(req, f)); err != nil {
			return Validated{}, err
		}
	}
	res, _, err := stringOf(req, "resolution")
	if err != nil {
		return Validated{}, err
	}
	if res == "" {
		res = "768P"
	}
	dur, _, err := intOf(req, "duration")
	if err != nil {
		return Validated{}, err
	}
	if dur == 0 {
		dur = 6
	}
	switch {
	case res != "768P" && res != "1080P":
		return Validated{}, fmt.Errorf("%w: resolution %q is not allowed: use 768P or 1080P", provider.ErrBadRequest, clip(res))
	case res == "1080P" && dur != 6:
		return Validated{}, fmt.Errorf("%w: duration %d is not allowed at resolution 1080P: 1080P takes 6 s; use 768P for 10 s", provider.ErrBadRequest, dur)
	case dur != 6 && dur != 10:
		return Validated{}, fmt.Errorf("%w: duration %d is not allowed: V1 takes 6 or 10 (10 at 768P only)", provider.ErrBadRequest, dur)
	}
	cb, _, err := stringOf(req, "callback_url")
	return Validated{MaxSeconds: dur, CallbackURL: cb}, err
}

func (minimax) Fields(*ir.Model) []string { return minimaxFields }

func (minimax) Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	out := provider.Request{"model": mustJSON(model)}
	for _, f := range minimaxFields {
		if v := provider.Field(req, f); v != nil {
			out[f] = v
		}
	}
	return &provider.Upstream{Path: "/v1/video_generation", Body: out.Encode(), Headers: bearer(p.APIKey)}, nil
}

// minimaxInvalidParams is MiniMax's "invalid params" (2013): the client's request at a create,
// an unknown task id at a query ("invalid params, task not found").
const minimaxInvalidParams = 2013

// minimaxBase is the envelope every MiniMax answer carries.
type minimaxBase struct {
	BaseResp *struct {
		StatusCode int    `json:"status_code"`
		StatusMsg  string `json:"status_msg"`
	} `json:"base_resp"`
}

// failure reads base_resp (and the HTTP status): nil when the call succeeded.
func (b minimaxBase) failure(status int) error {
	if status != http.StatusOK {
		return &Error{Code: httpCode(status), Message: fmt.Sprintf("MiniMax answered HTTP %d", status)}
	}
	if b.BaseResp == nil {
		return &Error{Code: "upstream_error", Message: "MiniMax's answer has no base_resp"}
	}
	if c := b.BaseResp.StatusCode; c != 0 {
		code := map[int]string{1002: "provider_rate_limited", 1004: "provider_auth_failed", 1008: "provider_balance",
			1026: "content_filter", 1027: "content_filter", minimaxInvalidParams: "invalid_request"}[c]
		return &Error{Code: cmp.Or(code, "upstream_error"), Message: fmt.Sprintf("MiniMax status_code %d: %s", c, b.BaseResp.StatusMsg)}
	}
	return nil
}

func (minimax) Created(status int, body []byte) (Created, error) {
	var a struct {
		minimaxBase
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal(body, &a); err != nil && status == http.StatusOK {
		return Created{}, fmt.Errorf("MiniMax's create answer is not JSON")
	}
	if err := a.failure(status); err != nil {
		return Created{}, err
	}
	if a.TaskID == "" {
		return Created{}, &Error{Code: "upstream_error", Message: "MiniMax accepted the task without a task_id"}
	}
	return Created{TaskID: a.TaskID}, nil
}

func (minimax) Query(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	return &provider.Upstream{Method: http.MethodGet, Path: "/v1/query/video_generation?task_id=" + url.QueryEscape(id), Headers: bearer(p.APIKey)}, nil
}

func (minimax) Queried(status int, body []byte) (State, error) {
	var a struct {
		minimaxBase
		Status string `json:"status"`
		FileID string `json:"file_id"`
		Width  int    `json:"video_width"`
		Height int    `json:"video_height"`
	}
	if err := json.Unmarshal(body, &a); err != nil && status == http.StatusOK {
		return State{}, fmt.Errorf("MiniMax's query answer is not JSON")
	}
	if a.BaseResp != nil && a.BaseResp.StatusCode == minimaxInvalidParams && status == http.StatusOK {
		// The task id is the query's only parameter: MiniMax does not know it.
		return State{}, fmt.Errorf("%w: MiniMax status_code %d: %s", ErrUnknown, minimaxInvalidParams, clip(a.BaseResp.StatusMsg))
	}
	if err := a.failure(status); err != nil {
		return State{}, err
	}
	st := State{FamilyStatus: a.Status}
	switch a.Status {
	case "Preparing", "Queueing":
		st.Status = Queued
	case "Processing":
		st.Status = InProgress
	case "Success":
		if a.FileID == "" {
			return State{}, fmt.Errorf("MiniMax reported Success without a file_id")
		}
		st.Status = Completed
		st.Videos = []Video{{Width: a.Width, Height: a.Height}}
		st.Follow = &provider.Upstream{Method: http.MethodGet, Path: "/v1/files/retrieve?file_id=" + url.QueryEscape(a.FileID)}
	case "Fail":
		st.Status = Failed
		st.Error = &Error{Code: "generation_failed", Message: "MiniMax could not generate the video"}
	default:
		return State{}, fmt.Errorf("MiniMax reported an unknown status %q", clip(a.Status))
	}
	return st, nil
}

// Followed adds the download URL of the file a Success named. The request price aside, V1 is
// billed on the requested duration: MiniMax's answers do not report one.
func (minimax) Followed(st *State, status int, body []byte) error {
	var a struct {
		minimaxBase
		File struct {
			DownloadURL string `json:"download_url"`
			CreatedAt   int64  `json:"created_at"`
		} `json:"file"`
	}
	if err := json.Unmarshal(body, &a); err != nil && status == http.StatusOK {
		return fmt.Errorf("MiniMax's file answer is not JSON")
	}
	if err := a.failure(status); err != nil {
		return err
	}
	if a.File.DownloadURL == "" || len(st.Videos) == 0 {
		return fmt.Errorf("MiniMax's file answer has no download_url")
	}
	from := time.Now()
	if a.File.CreatedAt > 0 {
		from = time.Unix(a.File.CreatedAt, 0)
	}
	st.Videos[0].URL, st.Videos[0].ExpiresAt = a.File.DownloadURL, from.Add(minimaxURLLife)
	return nil
}
