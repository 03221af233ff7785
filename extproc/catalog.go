package extproc

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/tollway/tollway/extproc/core"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/tollway/tollway/xds/ir"
)

// catalogEntry is one model as GET /v1/models shows it (docs/money.md#catalog). Lengths are null when unknown.
type catalogEntry struct {
	ID                          string     `json:"id"`
	Object                      string     `json:"object"` // "model", for OpenAI SDKs' models.list
	OwnedBy                     string     `json:"owned_by"`
	Name                        string     `json:"name"`
	InputModalities             []string   `json:"input_modalities"`
	OutputModalities            []string   `json:"output_modalities"`
	ContextLength               *int64     `json:"context_length"`
	MaxOutputLength             *int64     `json:"max_output_length"`
	SupportedSamplingParameters []string   `json:"supported_sampling_parameters"`
	SupportedFeatures           []string   `json:"supported_features"`
	Pricing                     ir.Pricing `json:"pricing"`
	IsReady                     bool       `json:"is_ready"`
	IsFree                      bool       `json:"is_free"`
}

func optional(n int64) *int64 {
	if n <= 0 {
		return nil
	}
	return &n
}

// Catalog labels of a model that the offline demo model may answer (provider type demo), so
// nobody takes its canned answers for a language model's.
const (
	demoOwner      = "tollway-demo"
	demoNameSuffix = " (demo: canned answers, no LLM)"
)

// entry renders m; ready says whether any of its providers can take traffic now.
func entry(m *core.Model, ready bool) catalogEntry {
	name, owner := m.Name, "tollway"
	if name == "" {
		name = m.ID
	}
	if m.Demo {
		name, owner = name+demoNameSuffix, demoOwner
	}
	return catalogEntry{
		ID: m.ID, Object: "model", OwnedBy: owner, Name: name,
		InputModalities: core.NonNil(m.InputModalities), OutputModalities: core.NonNil(m.OutputModalities),
		ContextLength: optional(m.ContextLength), MaxOutputLength: optional(m.MaxOutputLength),
		SupportedSamplingParameters: m.Sampling, SupportedFeatures: core.NonNil(m.SupportedFeatures),
		Pricing: m.Pricing, IsReady: ready, IsFree: m.Pricing.IsFree(),
	}
}

// catalog answers GET /v1/models and GET /v1/models/{id}. It works without a key (the spec's
// example sends none); a key restricted to some models sees only those. ids keeps the
// configuration's order (sorted by id).
func (x *exchange) catalog(path string) ([]byte, *core.APIError) {
	id, one := strings.CutPrefix(path, "/v1/models/")
	var entries []catalogEntry
	for _, mid := range x.RT.ModelIDs {
		if one && mid != id {
			continue
		}
		if x.Key != nil && !x.Key.Allows(mid) {
			continue
		}
		m := x.RT.Models[mid]
		entries = append(entries, entry(m, x.s.modelReady(x.RT, m)))
	}
	var body []byte
	switch {
	case one && len(entries) == 0:
		return nil, core.Errorf(http.StatusNotFound, "model_not_found", "model %q is not in the catalog; GET /v1/models lists the model ids you can use", id)
	case one:
		body, _ = json.Marshal(entries[0])
	default:
		if entries == nil {
			entries = []catalogEntry{}
		}
		body, _ = json.Marshal(struct {
			Object string         `json:"object"`
			Data   []catalogEntry `json:"data"`
		}{"list", entries})
	}
	return body, nil
}

// catalogProcessor answers GET /v1/models and GET /v1/models/{id} at their headers.
type catalogProcessor struct {
	core.AnsweredEarly
	x *exchange
}

func (c catalogProcessor) RequestHeaders(*extprocv3.HttpHeaders) (*extprocv3.ProcessingResponse, error) {
	x, hd := c.x, &c.x.Head
	if hd.Method != http.MethodGet {
		return x.Fail(core.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s is not supported; use GET", core.Clip(hd.Method), core.Clip(hd.Path))), nil
	}
	// No key is needed to read the catalog; a key that is sent must be valid.
	if hd.Auth != "" {
		if e := x.Authenticate(hd.Auth); e != nil {
			return x.Fail(e), nil
		}
	}
	body, e := x.catalog(hd.Path)
	if e != nil {
		return x.Fail(e), nil
	}
	return x.Reply(http.StatusOK, body), nil
}
