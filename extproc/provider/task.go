package provider

// Generation tasks (spec 4.3 videos, 4.4 images): the client creates a task, the gateway
// creates it at the provider, then queries it until it ends; a provider that answers at once
// (Gemini images) gives the finished task in its create answer. Each provider family is one
// adapter file behind TaskAdapter (minimax.go: V1, dashscope.go: V2, kling.go: V3, ...); the
// lifecycle around it (task record, polling, callbacks, billing) lives elsewhere and never
// reads a provider's shapes.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/tollway/tollway/xds/ir"
)

// TaskStatus is the gateway's status of a task, shaped after OpenAI's video object.
type TaskStatus string

const (
	TaskQueued     TaskStatus = "queued"
	TaskInProgress TaskStatus = "in_progress"
	TaskCompleted  TaskStatus = "completed"
	TaskFailed     TaskStatus = "failed"
)

// Terminal reports whether the status never changes again.
func (s TaskStatus) Terminal() bool { return s == TaskCompleted || s == TaskFailed }

// TaskRequest is what the gateway needs to know of a validated create request: the bounds of
// what it can cost (the hold) and where its callbacks go.
type TaskRequest struct {
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

// TaskState is what one query (plus its follow-ups) says of a task.
type TaskState struct {
	Status       TaskStatus
	FamilyStatus string // the provider's own status word, for debugging (e.g. "Queueing", "RUNNING")
	Progress     int    // 0-100 when the provider says; else derived from Status
	Videos       []TaskVideo
	Images       []TaskImage
	Text         string     // text the model wrote beside its images (I3), if any
	Error        *TaskError // set when Status is failed
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
	Follow *Upstream
}

// TaskImage is one produced image: a provider's URL (until ExpiresAt), or the image itself when
// the provider answers with its bytes (the gateway keeps them until ExpiresAt).
type TaskImage struct {
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
	Done *TaskState
}

// TaskVideo is one produced video.
type TaskVideo struct {
	URL       string
	ExpiresAt time.Time // zero when the provider does not say (the adapter documents its default)
	Seconds   decimal.Decimal
	Width     int
	Height    int
}

// TaskError is a failure as the client sees it: a code and a message that names the cause.
type TaskError struct {
	Code    string
	Message string
}

// TaskAdapter builds and reads one provider family's task requests. Upstream.Method says
// GET for queries; Upstream.Path is below the provider's base path.
type TaskAdapter interface {
	// Validate checks the client's create body against the family's rules (spec 4.3, 4.4, 8)
	// before any upstream call. Errors wrap ErrBadRequest and name the field, the value and
	// what is allowed.
	Validate(m *ir.Model, req Request) (TaskRequest, error)
	// Create builds the provider's create request; model is the provider's model name.
	Create(p *ir.Provider, m *ir.Model, model string, req Request) (*Upstream, error)
	// Created reads the answer to Create: the provider's task id (or the finished task), or an
	// error (a *TaskError when the provider refused the task, e.g. MiniMax's non-zero base_resp
	// in an HTTP 200).
	Created(status int, body []byte) (Created, error)
	// Query builds the status request of the provider's task id.
	Query(p *ir.Provider, m *ir.Model, taskID string) (*Upstream, error)
	// Queried reads the answer to Query.
	Queried(status int, body []byte) (TaskState, error)
	// Followed completes st from the answer to st.Follow.
	Followed(st *TaskState, status int, body []byte) error
}

// TaskCanceler is implemented by task adapters whose provider can cancel a task it accepted
// (DashScope, while the task is still queued): the gateway cancels a task it could not record,
// rather than leave it running where nobody can see it.
type TaskCanceler interface {
	// Cancel builds the cancel request of the provider's task id; a 2xx answer means it is
	// cancelled.
	Cancel(p *ir.Provider, m *ir.Model, taskID string) (*Upstream, error)
}

// TaskFields is implemented by the adapter of every family whose models make tasks only (not
// I3, whose catalog entry lists its chat parameters): the request fields the family takes for
// model m, the gateway's own aside, dotted below objects (input.prompt, parameters.seed).
// Validate refuses any other field with the same declaration, and the catalog lists these as
// the model's supported_sampling_parameters, so the two cannot drift.
type TaskFields interface{ Fields(m *ir.Model) []string }

// TaskFieldsOf is what m's family takes (TaskFields), sorted; nil when its adapter has no list.
func TaskFieldsOf(m *ir.Model) []string {
	a, ok := taskAdapters[m.Family].(TaskFields)
	if !ok {
		return nil
	}
	return slices.Sorted(slices.Values(a.Fields(m)))
}

// FormStrings is implemented by task adapters with string fields that a multipart form, which
// carries only text, could be read as numbers or booleans beyond the common ones (Kling's
// duration "5"): their paths, dot-joined without array indexes.
type FormStrings interface{ FormStrings() []string }

func (e *TaskError) Error() string { return e.Code + ": " + e.Message }

// ErrTaskUnknown is what Queried wraps when the provider says it does not know the task id (one
// it never issued, or one past its retention). It is not a failed task by itself: right after a
// create a provider's query side may not know the task yet, so the lifecycle (tasks.Service)
// ends the task only once the provider has said so several times over a while.
var ErrTaskUnknown = errors.New("the provider does not know the task")

var taskAdapters = map[string]TaskAdapter{}

// RegisterTask makes a the task adapter of media family (V1, I2, ...): each family file
// registers itself; tests register stand-ins.
func RegisterTask(family string, a TaskAdapter) { taskAdapters[family] = a }

// TaskFor returns the task adapter of a media family.
func TaskFor(family string) (TaskAdapter, error) {
	a, ok := taskAdapters[family]
	if !ok {
		return nil, fmt.Errorf("provider: no task adapter for family %q", family)
	}
	return a, nil
}
