// Package tasks is the lifecycle of asynchronous generation tasks (videos; images next): the
// task object clients see, creation with fallback, status refresh through Envoy, the
// background poller, signed callbacks from a durable outbox, and the task's bill. Provider
// shapes stay in extproc/provider's task adapters; records in store.
package tasks

import (
	"strconv"
	"time"

	"github.com/tollway/tollway/extproc/provider"
)

// Object is a task as clients see it: at creation, from GET /v1/{videos,images}/{id}, and in
// callbacks. It follows OpenAI's video object (id, object, model, status, progress,
// created_at, completed_at, expires_at, error, seconds, size) so the OpenAI SDKs read it, and
// adds what the gateway knows: the result, the provider, the cost and the provider's status.
type Object struct {
	ID          string       `json:"id"`
	Object      string       `json:"object"` // "video" or "image"
	Model       string       `json:"model"`
	Status      string       `json:"status"` // queued | in_progress | completed | failed
	Progress    int          `json:"progress"`
	CreatedAt   int64        `json:"created_at"`
	CompletedAt *int64       `json:"completed_at"`
	ExpiresAt   *int64       `json:"expires_at"` // when the result's URLs stop working
	Error       *ObjectError `json:"error"`
	Seconds     string       `json:"seconds,omitempty"` // the produced duration (OpenAI: a string)
	Size        string       `json:"size,omitempty"`    // "WIDTHxHEIGHT" of the first video
	Result      *Result      `json:"result"`
	Provider    string       `json:"provider,omitempty"`
	// ProviderStatus is the provider's own status word (Queueing, RUNNING, succeed...), for
	// debugging; the status table in the README maps it.
	ProviderStatus string `json:"provider_status,omitempty"`
	// Cost is what the task was billed, an exact decimal string in USD; null until settled.
	Cost *string `json:"cost"`
}

// ObjectError says why a task failed.
type ObjectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Result is what a completed task produced.
type Result struct {
	Videos []Video `json:"videos,omitempty"`
}

// Video is one produced video. Once its URL has expired the URL is withheld (a dead link helps
// nobody) and Expired says so.
type Video struct {
	URL       string `json:"url,omitempty"`
	ExpiresAt *int64 `json:"expires_at"`
	Expired   bool   `json:"expired,omitempty"`
	Seconds   string `json:"seconds,omitempty"`
	Width     int    `json:"width,omitempty"`
	Height    int    `json:"height,omitempty"`
}

// progressOf gives a progress when the provider says none: 0 until it runs, 50 while it runs
// (no provider reports a fraction we could trust), 100 when done.
func progressOf(st provider.TaskStatus, reported int) int {
	switch {
	case st.Terminal():
		return 100
	case reported > 0:
		return min(reported, 99)
	case st == provider.TaskInProgress:
		return 50
	}
	return 0
}

// videosOf renders the produced videos as of now: expired URLs are withheld. It returns the
// earliest expiry, which is the object's expires_at.
func videosOf(vs []provider.TaskVideo, now time.Time) ([]Video, *int64) {
	var out []Video
	var first *int64
	for _, v := range vs {
		o := Video{URL: v.URL, Width: v.Width, Height: v.Height}
		if !v.Seconds.IsZero() {
			o.Seconds = v.Seconds.String()
		}
		if !v.ExpiresAt.IsZero() {
			at := v.ExpiresAt.Unix()
			o.ExpiresAt = &at
			if first == nil || at < *first {
				first = &at
			}
			if !now.Before(v.ExpiresAt) {
				o.URL, o.Expired = "", true
			}
		}
		out = append(out, o)
	}
	return out, first
}

func size(vs []provider.TaskVideo) string {
	if len(vs) == 0 || vs[0].Width == 0 || vs[0].Height == 0 {
		return ""
	}
	return strconv.Itoa(vs[0].Width) + "x" + strconv.Itoa(vs[0].Height)
}
