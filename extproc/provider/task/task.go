// Package task holds the media task adapters (docs/media.md: videos and images): the client creates
// a task, the gateway creates it at the provider, then queries it until it ends; a provider
// that answers at once (Gemini images) gives the finished task in its create answer. Each
// family is one file per (task API, provider API) pair behind Adapter (videos_minimax.go: V1,
// videos_dashscope.go: V2, videos_kling.go: V3, images_kling.go: I1, images_dashscope.go: I2
// and I2b, images_gemini.go: I3; a family's request rules in its _rules.go), chosen by For. The
// lifecycle around it (task record, polling, callbacks, billing: extproc/tasks) never reads a
// provider's shapes.
package task

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/xds/ir"
)

// Status is the gateway's status of a task, shaped after OpenAI's video object.
type Status string

const (
	Queued     Status = "queued"
	InProgress Status = "in_progress"
	Completed  Status = "completed"
	Failed     Status = "failed"
)

// Terminal reports whether the status never changes again.
func (s Status) Terminal() bool { return s == Completed || s == Failed }

// Validated is what the gateway needs to know of a validated create request: the bounds of
// what it can cost (the hold) and where its callbacks go.
type Validated struct {
	// MaxSeconds is the longest video the request allows.
	MaxSeconds int64
	// MaxImages is the most images the request can produce.
	MaxImages int64
	// PromptTokens and MaxOutputTokens bound the tokens of a family billed by tokens too (I3):
	// a strict bound of the prompt, and the output the model may produce besides its images.
	PromptTokens, MaxOutputTokens int64
	// CallbackURL is the client's callback_url, if any (the gateway delivers callbacks itself;
	// adapters never pass it to the provider).
	CallbackURL string
	// Removed lists, sorted, the fields Create leaves out because they do not apply to this
	// request (I2b's thinking_mode in an image set), as paths (parameters.thinking_mode): the
	// create answer names them in x-tollway-removed-params.
	Removed []string
}

// State is what one query (plus its follow-ups) says of a task.
type State struct {
	Status       Status
	FamilyStatus string // the provider's own status word, for debugging (e.g. "Queueing", "RUNNING")
	Progress     int    // 0-100 when the provider says; else derived from Status
	Videos       []Video
	Images       []Image
	Text         string // text the model wrote beside its images (I3), if any
	Error        *Error // set when Status is failed
	// BilledSeconds is the duration the provider reports it produced (usage), if it does;
	// zero: bill from the videos' durations.
	BilledSeconds decimal.Decimal
	// BilledImages is the number of images the provider reports it produced (usage), if it
	// does; zero: count Images.
	BilledImages int64
	// PromptTokens and CompletionTokens are the tokens the provider reports (I3), billed at the
	// model's token prices; ImageTokens is the part of CompletionTokens that was images, billed
	// per image instead where the model has an image price (ir.Pricing.Cost).
	PromptTokens, CompletionTokens, ImageTokens int64
	// Follow, when set, is one more request needed to complete the state (MiniMax: the file
	// retrieve that turns a file id into a download URL); its answer goes to Followed. Without
	// headers of its own it carries the query's.
	Follow *provider.Upstream
}

// Image is one produced image: a provider's URL (until ExpiresAt), or the image itself when
// the provider answers with its bytes (the gateway keeps them until ExpiresAt).
type Image struct {
	URL       string
	Data      []byte // the decoded image
	MIMEType  string
	ExpiresAt time.Time // zero: the adapter documents its default
	Width     int
	Height    int
}

// Created is what a create answer says.
type Created struct {
	TaskID string // the provider's task id ("" for a provider that answered at once)
	// Done is the finished task when the provider answered at once (its state is terminal).
	Done *State
}

// Video is one produced video.
type Video struct {
	URL       string
	ExpiresAt time.Time // zero when the provider does not say (the adapter documents its default)
	Seconds   decimal.Decimal
	Width     int
	Height    int
}

// Error is a failure as the client sees it: a code and a message that names the cause.
type Error struct {
	Code    string
	Message string
}

// Adapter builds and reads one provider family's task requests. Upstream.Method says
// GET for queries; Upstream.Path is below the provider's base path.
type Adapter interface {
	// Validate checks the client's create body against the family's rules (docs/media.md)
	// before any upstream call. Errors wrap ErrBadRequest and name the field, the value and
	// what is allowed.
	Validate(m *ir.Model, req provider.Request) (Validated, error)
	// Create builds the provider's create request; model is the provider's model name.
	Create(p *ir.Provider, m *ir.Model, model string, req provider.Request) (*provider.Upstream, error)
	// Created reads the answer to Create: the provider's task id (or the finished task), or an
	// error (a *Error when the provider refused the task, e.g. MiniMax's non-zero base_resp
	// in an HTTP 200).
	Created(status int, body []byte) (Created, error)
	// Query builds the status request of the provider's task id.
	Query(p *ir.Provider, m *ir.Model, taskID string) (*provider.Upstream, error)
	// Queried reads the answer to Query.
	Queried(status int, body []byte) (State, error)
	// Followed completes st from the answer to st.Follow.
	Followed(st *State, status int, body []byte) error
}

// Canceler is implemented by task adapters whose provider can cancel a task it accepted
// (DashScope, while the task is still queued): the gateway cancels a task it could not record,
// rather than leave it running where nobody can see it.
type Canceler interface {
	// Cancel builds the cancel request of the provider's task id; a 2xx answer means it is
	// cancelled.
	Cancel(p *ir.Provider, m *ir.Model, taskID string) (*provider.Upstream, error)
}

// FieldLister is implemented by the adapter of every family whose models make tasks only (not
// I3, whose catalog entry lists its chat parameters): the request fields the family takes for
// model m, the gateway's own aside, dotted below objects (input.prompt, parameters.seed).
// Validate refuses any other field with the same declaration, and the catalog lists these as
// the model's supported_sampling_parameters, so the two cannot drift.
type FieldLister interface{ Fields(m *ir.Model) []string }

// FieldsOf is what m's family takes (FieldLister), sorted; nil when its adapter has no list.
func FieldsOf(m *ir.Model) []string {
	ad, _ := For(m.Family)
	a, ok := ad.(FieldLister)
	if !ok {
		return nil
	}
	return slices.Sorted(slices.Values(a.Fields(m)))
}

// FormStrings is implemented by task adapters with string fields that a multipart form, which
// carries only text, could be read as numbers or booleans beyond the common ones (Kling's
// duration "5"): their paths, dot-joined without array indexes.
type FormStrings interface{ FormStrings() []string }

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// ErrUnknown is what Queried wraps when the provider says it does not know the task id (one
// it never issued, or one past its retention). It is not a failed task by itself: right after a
// create a provider's query side may not know the task yet, so the lifecycle (tasks.Service)
// ends the task only once the provider has said so several times over a while.
var ErrUnknown = errors.New("the provider does not know the task")

// For returns the task adapter of a media family.
func For(family string) (Adapter, error) {
	switch family {
	case "V1":
		return minimax{}, nil
	case "V2":
		return dashscopeVideo{}, nil
	case "V3":
		return kling{}, nil
	case "I1":
		return klingImage{}, nil
	case "I2", "I2b":
		return dashscopeImage{family: family}, nil
	case "I3":
		return geminiImage{}, nil
	}
	return nil, fmt.Errorf("provider: no task adapter for family %q", family)
}
