package task

// dashscopeImage is families I2 (Qwen-Image) and I2b (Wan 2.7 image) of
// docs/media.md#image-families, on Alibaba Model Studio (DashScope, type dashscope, base_url the
// API host root as for V2), each in two variants, standard and pro (configured for example as
// qwen-image-plus / qwen-image-max and wan2.7-image / wan2.7-image-pro). Both take the spec's body:
// input.messages (one user message whose content is {text} and {image} parts) and parameters.
//
// Endpoints, by what DashScope offers each model:
//   - I2 standard (qwen-image-plus and qwen-image are the only Qwen-Image models with an
//     asynchronous API): POST /api/v1/services/aigc/text2image/image-synthesis with
//     X-DashScope-Async: enable, then GET /api/v1/tasks/{id}. That API takes input.prompt, not
//     messages, so the text part becomes input.prompt; parameters pass as they are. It takes
//     no image: a standard request with an image part goes the synchronous way below.
//   - I2 pro (qwen-image-max answers only synchronously) and I2 requests with an image part:
//     POST /api/v1/services/aigc/multimodal-generation/generation, which answers with the
//     finished images; the task is created already completed (Created.Done).
//   - I2b, both variants: POST /api/v1/services/aigc/image-generation/generation with
//     X-DashScope-Async: enable (the same messages body), then GET /api/v1/tasks/{id}.
//
// Results: SUCCEEDED tasks list their images in output.results[].url (text2image) or
// output.choices[].message.content[].image (the messages APIs); usage.image_count is billed.
// DashScope keeps results 24 h: a URL expires at its signature's expiry when it carries one
// (OSS: Expires, or x-oss-date + x-oss-expires), else 24 h after the task ended. Statuses and
// errors are read as for V2 (dashscope.go); a FAILED task refused by content inspection is
// failed with content_filter.
//
// The rules a request is checked against before any provider call are in
// dashscope_image_rules.go. In an I2b image set (enable_sequential), thinking_mode and
// color_palette do not apply: they are checked, left out of DashScope's body, and named in
// x-tollway-removed-params.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tollway/tollway/extproc/apischema/dashscope"
	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

type dashscopeImage struct{ family string }

// dashscopeImageSubpath is where DashScope's generation APIs live.
const dashscopeImageSubpath = "/api/v1/services/aigc/"

func (d dashscopeImage) Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	h := bearer(p.APIKey)
	out := provider.Request{"model": mustJSON(model), "input": provider.Field(req, "input")}
	if v := provider.Field(req, "parameters"); v != nil {
		out["parameters"] = v
		if d.family == "I2b" {
			var err error
			if out["parameters"], err = wanSentParameters(v); err != nil {
				return nil, err
			}
		}
	}
	path := "image-generation/generation"
	if d.family == "I2" {
		prompt, images, err := messageOf(req)
		if err != nil {
			return nil, err
		}
		if m.Variant != "standard" || images {
			return &provider.Upstream{Path: dashscopeImageSubpath + "multimodal-generation/generation", Body: out.Encode(), Headers: h}, nil
		}
		out["input"], _ = json.Marshal(map[string]string{"prompt": prompt})
		path = "text2image/image-synthesis"
	}
	h["x-dashscope-async"] = "enable"
	return &provider.Upstream{Path: dashscopeImageSubpath + path, Body: out.Encode(), Headers: h}, nil
}

// wanSentParameters are I2b's parameters as DashScope gets them: without those an image set
// leaves out (wanLeftOut), else byte for byte.
func wanSentParameters(raw json.RawMessage) (json.RawMessage, error) {
	p, err := provider.ParseRequest(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: parameters must be an object", provider.ErrBadRequest)
	}
	drop := wanLeftOut(p)
	if len(drop) == 0 {
		return raw, nil
	}
	for _, k := range drop {
		delete(p, k)
	}
	return p.Encode(), nil
}

// messageOf reads the prompt of a validated request's one message and whether it carries an
// image part; image values are seen, not copied.
func messageOf(req provider.Request) (prompt string, images bool, err error) {
	var in struct {
		Messages []struct {
			Content []struct {
				Text  *string  `json:"text"`
				Image *present `json:"image"`
			} `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(provider.Field(req, "input"), &in) != nil || len(in.Messages) != 1 {
		return "", false, fmt.Errorf("%w: input.messages must be one user message", provider.ErrBadRequest)
	}
	for _, part := range in.Messages[0].Content {
		if part.Text != nil {
			prompt = *part.Text
		}
		images = images || part.Image != nil
	}
	return prompt, images, nil
}

// present records that a JSON value is there without keeping it.
type present struct{}

func (*present) UnmarshalJSON([]byte) error { return nil }

// imagesDone is the finished state of an image task whose output is r, ended at end: its images
// (output.results[] of text2image, output.choices[].message.content[] of the messages APIs).
func imagesDone(r dashscope.Output, u dashscope.Usage, end time.Time, status string) State {
	w, h := u.Width, u.Height
	if mt := sizeRE.FindStringSubmatch(u.Size); mt != nil && w == 0 {
		w, _ = strconv.Atoi(mt[1])
		h, _ = strconv.Atoi(mt[2])
	}
	var urls []string
	why := ""
	for _, x := range r.Results {
		if x.URL != "" {
			urls = append(urls, x.URL)
		} else if why == "" && x.Code != "" {
			why = x.Code + ": " + x.Message
		}
	}
	for _, c := range r.Choices {
		for _, part := range c.Message.Content {
			if part.Image != "" {
				urls = append(urls, part.Image)
			}
		}
		if why == "" && c.FinishReason != "" && c.FinishReason != "stop" {
			why = "finish_reason " + c.FinishReason
		}
	}
	st := State{Status: Completed, FamilyStatus: status, BilledImages: max(u.ImageCount, 0)}
	for _, raw := range urls {
		st.Images = append(st.Images, Image{URL: raw, MIMEType: imageMIME(raw), ExpiresAt: resultExpiry(raw, end), Width: w, Height: h})
	}
	if len(st.Images) == 0 {
		st.Status, st.BilledImages = Failed, 0
		st.Error = &Error{Code: "no_image", Message: "DashScope returned no image" + strings.TrimSuffix(" ("+why+")", " ()")}
	}
	return st
}

// resultExpiry is when a DashScope result URL stops working: the expiry its OSS signature
// carries (Expires, or x-oss-date + x-oss-expires), else 24 h after the task ended.
func resultExpiry(raw string, end time.Time) time.Time {
	if u, err := url.Parse(raw); err == nil {
		q := u.Query()
		if s, err := strconv.ParseInt(q.Get("Expires"), 10, 64); err == nil && s > 0 {
			return time.Unix(s, 0)
		}
		if at, err := time.Parse("20060102T150405Z", q.Get("x-oss-date")); err == nil {
			if s, err := strconv.ParseInt(q.Get("x-oss-expires"), 10, 64); err == nil && s > 0 {
				return at.Add(time.Duration(s) * time.Second)
			}
		}
	}
	return end.Add(dashscopeResultLife)
}

func imageMIME(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	p := strings.ToLower(u.Path)
	for ext, t := range map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"} {
		if strings.HasSuffix(p, ext) {
			return t
		}
	}
	return ""
}

// Created reads a create answer: a task id (the asynchronous APIs) or the finished images (the
// synchronous one).
func (d dashscopeImage) Created(status int, body []byte) (Created, error) {
	var a dashscope.Answer
	if err := json.Unmarshal(body, &a); err != nil && status == http.StatusOK {
		return Created{}, fmt.Errorf("DashScope's create answer is not JSON")
	}
	switch {
	case status != http.StatusOK:
		return Created{}, dashscopeFailure(a.Error, status)
	case a.Output.TaskID != "":
		return Created{TaskID: a.Output.TaskID}, nil
	case len(a.Output.Choices) > 0 || len(a.Output.Results) > 0:
		st := imagesDone(a.Output, a.Usage, time.Now(), "SUCCEEDED")
		return Created{Done: &st}, nil
	}
	return Created{}, &Error{Code: "upstream_error", Message: "DashScope answered without a task_id or an image"}
}

func (d dashscopeImage) Query(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	return dashscopeVideo{}.Query(p, m, id)
}

// Cancel: image tasks are cancelled as video tasks are.
func (d dashscopeImage) Cancel(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	return dashscopeVideo{}.Cancel(p, m, id)
}

func (d dashscopeImage) Queried(status int, body []byte) (State, error) {
	a, st, err := dashscopeQueried(status, body, true)
	if err != nil || st.Status != Completed {
		return st, err
	}
	return imagesDone(a.Output, a.Usage, dashscopeTime(a.Output.EndTime), a.Output.Status), nil
}

func (dashscopeImage) Followed(*State, int, []byte) error { return nil }

func (dashscopeImage) FormStrings() []string {
	return []string{"input.messages.role", "input.messages.content.text", "input.messages.content.image",
		"parameters.size", "parameters.negative_prompt", "parameters.color_palette.hex", "parameters.color_palette.ratio"}
}
