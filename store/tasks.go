package store

// Media task records (videos, images) and the callbacks that announce their changes.

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Task is one media generation task.
type Task struct {
	ID             string          `json:"id"`
	Kind           string          `json:"kind"` // video | image
	Account        string          `json:"account"`
	KeyID          string          `json:"key_id"`
	RequestID      string          `json:"request_id,omitempty"`
	Model          string          `json:"model"`
	Family         string          `json:"family"`
	Variant        string          `json:"variant,omitempty"`
	Route          string          `json:"route,omitempty"`
	Provider       string          `json:"provider"`
	ProviderTaskID string          `json:"provider_task_id"`
	Status         string          `json:"status"` // queued | in_progress | completed | failed
	FamilyStatus   string          `json:"family_status,omitempty"`
	Progress       int             `json:"progress"`
	Videos         []TaskVideo     `json:"videos,omitempty"`
	Images         []TaskImage     `json:"images,omitempty"`
	Text           string          `json:"text,omitempty"` // what the model wrote beside its images
	BilledSeconds  decimal.Decimal `json:"billed_seconds"` // the provider's usage, when it reports one
	// BilledImages is the provider's image count (usage), when it reports one.
	BilledImages int64 `json:"billed_images,omitempty"`
	// PromptTokens and CompletionTokens are the provider's token usage, for families also
	// billed by tokens (I3); ImageTokens is the part of CompletionTokens that was images.
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	ImageTokens      int64 `json:"image_tokens,omitempty"`
	// RequestedSeconds is the duration asked for: what is billed when the provider reports
	// neither usage nor the videos' durations (MiniMax).
	RequestedSeconds int64           `json:"requested_seconds"`
	Error            *TaskError      `json:"error,omitempty"`
	Hold             decimal.Decimal `json:"hold"` // held at creation, so a restart can hold it again
	Cost             decimal.Decimal `json:"cost"`
	// Overage is what the provider's report priced beyond the hold: the cost is capped at it.
	Overage decimal.Decimal `json:"overage,omitzero"`
	Settled bool            `json:"settled"`
	// Paid: the task was paid through x402 when it was created; its cost is shown, never
	// debited from credits.
	Paid        bool   `json:"paid,omitempty"`
	CallbackURL string `json:"callback_url,omitempty"`
	// Trace is the W3C traceparent of the create's request when it was traced: a task the poller
	// bills later is settled in its create's trace.
	Trace       string    `json:"trace,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	CompletedAt time.Time `json:"completed_at"`
}

// TaskVideo is one produced video.
type TaskVideo struct {
	URL       string          `json:"url"`
	ExpiresAt time.Time       `json:"expires_at"`
	Seconds   decimal.Decimal `json:"seconds"`
	Width     int             `json:"width,omitempty"`
	Height    int             `json:"height,omitempty"`
}

// TaskImage is one produced image: a provider's URL, or the image itself (Blob), kept until
// ExpiresAt.
type TaskImage struct {
	URL       string    `json:"url,omitempty"`
	MIMEType  string    `json:"mime_type,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	Width     int       `json:"width,omitempty"`
	Height    int       `json:"height,omitempty"`
	// Blob is where the image's bytes are kept when the provider sent them (not a URL); set
	// by the store when the task is written with Data.
	Blob string `json:"blob,omitempty"`
	// Data is the image's bytes: written with the task, read back by GetTask (nil once expired).
	Data []byte `json:"-"`
}

// TaskError is why a task failed.
type TaskError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Terminal reports whether the task's status never changes again.
func (t *Task) Terminal() bool { return t.Status == "completed" || t.Status == "failed" }

// Callback is one delivery of a task object to a client's callback URL.
type Callback struct {
	ID        string    `json:"id"` // the idempotency id receivers deduplicate on
	TaskID    string    `json:"task_id"`
	Account   string    `json:"account"`
	URL       string    `json:"url"`
	Body      []byte    `json:"body"`
	Attempt   int       `json:"attempt"`
	NextAt    time.Time `json:"next_at"`
	CreatedAt time.Time `json:"created_at"`
}

const (
	maxTaskURL     = 4096
	maxTaskText    = 4096
	maxTaskVideos  = 16
	maxTaskImages  = 16
	maxImageBytes  = 64 << 20
	maxModelText   = 256 << 10 // text a model returned beside its images
	maxCallbackLen = 1 << 20
)

var idEncoding = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// NewTaskID makes an unguessable task id: kind_ and 26 characters of 128 random bits.
func NewTaskID(kind string) string { return kind + "_" + randomID() }

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

// Validate refuses a record no store may hold; the error says which bound it breaks.
func (t *Task) Validate() error {
	switch {
	case t.ID == "" || len(t.ID) > 64:
		return fmt.Errorf("task id %q", t.ID)
	case t.Account == "" || t.Model == "" || t.Provider == "" || t.ProviderTaskID == "" || len(t.ProviderTaskID) > 256:
		return fmt.Errorf("task %s lacks its account, model, provider or provider task id", t.ID)
	case len(t.CallbackURL) > maxTaskURL || len(t.Videos) > maxTaskVideos || len(t.Images) > maxTaskImages || len(t.Trace) > 128:
		return fmt.Errorf("task %s: callback URL, trace, video or image list too long", t.ID)
	case len(t.Text) > maxModelText:
		return fmt.Errorf("task %s: the model's text is over %d bytes", t.ID, maxModelText)
	case t.Error != nil && (len(t.Error.Message) > maxTaskText || len(t.Error.Code) > 128):
		return fmt.Errorf("task %s: error text too long", t.ID)
	}
	for _, v := range t.Videos {
		if len(v.URL) > maxTaskURL {
			return fmt.Errorf("task %s: a video URL is over %d bytes", t.ID, maxTaskURL)
		}
	}
	for _, im := range t.Images {
		if len(im.URL) > maxTaskURL || len(im.MIMEType) > 128 || len(im.Data) > maxImageBytes {
			return fmt.Errorf("task %s: an image URL, type or size is over its bound (%d bytes of URL, %d MiB)", t.ID, maxTaskURL, maxImageBytes>>20)
		}
	}
	return nil
}

// TaskChange is what a task update writes beside the task, in the same transaction.
type TaskChange struct {
	Callbacks []Callback // announcements of the change, to the outbox
	// Usage is the bill of a task that completed: settled (record, debit, aggregates, month
	// spend, exactly once per RequestID) with the task's new state, so no crash can leave a
	// completed task unbilled or bill it twice.
	Usage *UsageRecord
	// Lease, on PutTaskChange only, leases the new task to its creator in the same transaction,
	// so no other replica claims it before its creator polls it (UpdateTask ignores it).
	Lease *TaskLease
}

// Prepare checks a callback bound for the outbox (ErrInvalid) and fills what is empty: its id,
// its creation time (now) and when it is due (at once).
func (c *Callback) Prepare(now time.Time) error {
	if c.URL == "" || len(c.URL) > maxTaskURL || len(c.Body) > maxCallbackLen {
		return Errorf(ErrInvalid, "store: callback for task %s: URL empty or too long, or body over %d bytes", c.TaskID, maxCallbackLen)
	}
	if c.ID == "" {
		c.ID = "cb_" + randomID()
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now.UTC()
	}
	if c.NextAt.IsZero() {
		c.NextAt = c.CreatedAt
	}
	return nil
}

// NewCallbackSecret makes an account's secret for signing its callbacks.
func NewCallbackSecret() string {
	var r [32]byte
	_, _ = rand.Read(r[:])
	return "whsec_" + strings.ToLower(idEncoding.EncodeToString(r[:]))
}
