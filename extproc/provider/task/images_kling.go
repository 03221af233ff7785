package task

// klingImage is family I1 (docs/media.md#image-families): Kling image generation, on the same
// provider as V3 (type kling, base_url the API host root, the same JWT signing, model_name for
// model, the same envelope and numeric codes: kling.go). A task is created with POST
// /v1/images/generations and queried with GET /v1/images/generations/{id}; a succeed carries
// task_result.images[{index, url}]. Kling clears generated images after 30 days, so a URL is
// reported to expire then (it gives no expiry of its own). Kling reports no usage: an image task is
// billed on the images it returned. An unknown or cleared task id (HTTP 404, code 1203) is
// ErrUnknown: the lifecycle fails the task with task_expired_or_unknown once Kling has said so a
// few times.
//
// The spec shows I1 as model, prompt, cfg_scale, mode, duration (a string) and aspect_ratio
// and nothing more. How they map:
//   - prompt (required, up to 2500 characters) and Kling's negative_prompt (up to 2500) pass.
//   - n, Kling's number of images (1 to 9, default 1), passes: it sizes the hold.
//   - aspect_ratio takes Kling's image values (16:9, 9:16, 1:1, 4:3, 3:4, 3:2, 2:3, 21:9) and
//     passes.
//   - cfg_scale, mode and duration are checked with V3's rules (a number 0 to 1; std or pro;
//     the string "5" or "10") so one client body shape serves both families, and are not sent:
//     Kling's image endpoint has no such parameters (they are video parameters).
//   - The spec shows no image field and the catalog lists I1's input as text, so Kling's
//     reference-image fields (image, image_reference, image_fidelity, human_fidelity) are not
//     offered, nor resolution; they are refused by name with every other field.

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

type klingImage struct{}

var (
	klingImageFields = []string{"prompt", "negative_prompt", "n", "aspect_ratio", "cfg_scale", "mode", "duration"}
	// klingImageSent are the fields Kling's image endpoint takes; the others stay here.
	klingImageSent   = []string{"prompt", "negative_prompt", "n", "aspect_ratio"}
	klingImageRatios = []string{"16:9", "9:16", "1:1", "4:3", "3:4", "3:2", "2:3", "21:9"}
)

// klingMaxImages is the most images Kling makes in one request.
const klingMaxImages = 9

func (klingImage) Validate(m *ir.Model, req provider.Request) (Validated, error) {
	if err := onlyFields("I1", req, klingImageFields); err != nil {
		return Validated{}, err
	}
	if err := klingPrompts(req, "I1 is text-to-image"); err != nil {
		return Validated{}, err
	}
	n, ok, err := intOf(req, "n")
	if err != nil {
		return Validated{}, err
	}
	if !ok {
		n = 1
	}
	if n < 1 || n > klingMaxImages {
		return Validated{}, fmt.Errorf("%w: n %d is out of range: Kling makes 1 to %d images a request", provider.ErrBadRequest, n, klingMaxImages)
	}
	if err := klingVideoParams("I1", req, klingImageRatios); err != nil {
		return Validated{}, err
	}
	cb, _, err := stringOf(req, "callback_url")
	return Validated{MaxImages: n, CallbackURL: cb}, err
}

func (klingImage) FormStrings() []string { return []string{"duration"} }

// Fields are what I1 honours: the spec's video fields it checks but does not send are not
// listed.
func (klingImage) Fields(*ir.Model) []string { return klingImageSent }

func (klingImage) Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error) {
	out := provider.Request{"model_name": mustJSON(model)}
	for _, f := range klingImageSent {
		if v := provider.Field(req, f); v != nil {
			out[f] = v
		}
	}
	h, err := klingHeaders(p)
	if err != nil {
		return nil, err
	}
	return &provider.Upstream{Path: "/v1/images/generations", Body: out.Encode(), Headers: h}, nil
}

func (klingImage) Created(status int, body []byte) (Created, error) {
	return kling{}.Created(status, body)
}

func (klingImage) Query(p *ir.Provider, m *ir.Model, id string) (*provider.Upstream, error) {
	h, err := klingHeaders(p)
	if err != nil {
		return nil, err
	}
	return &provider.Upstream{Method: http.MethodGet, Path: "/v1/images/generations/" + url.PathEscape(id), Headers: h}, nil
}

func (klingImage) Queried(status int, body []byte) (State, error) {
	e, st, err := klingQueried(status, body, "image")
	if err != nil || st.Status != Completed {
		return st, err
	}
	exp := time.Now().Add(klingResultLife)
	for _, im := range e.Data.TaskResult.Images {
		if im.URL != "" {
			st.Images = append(st.Images, Image{URL: im.URL, ExpiresAt: exp})
		}
	}
	if len(st.Images) == 0 {
		return State{}, fmt.Errorf("Kling reported succeed without an image")
	}
	return st, nil
}

func (klingImage) Followed(*State, int, []byte) error { return nil }
