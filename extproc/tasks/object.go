// Package tasks is the lifecycle of asynchronous generation tasks (videos and images): the
// media endpoints' processor at the edge (media.go: admission, GET of a task; create.go: the
// create and its hold), the task object clients see, creation with fallback, status refresh
// through Envoy, the background poller, signed callbacks from a durable outbox, and the task's
// bill. Provider
// shapes stay in extproc/provider/task's adapters; records in store.
package tasks

import (
	"encoding/base64"
	"strconv"
	"time"

	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/store"
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
	// Route is the route id the task was created through (model is the route's model that ran).
	Route string `json:"route,omitempty"`
	// ProviderStatus is the provider's own status word (Queueing, RUNNING, succeed...), for
	// debugging; the status table in docs/media.md maps it.
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
	Images []Image `json:"images,omitempty"`
	// Text is what the model wrote beside its images (I3 with responseModalities TEXT).
	Text string `json:"text,omitempty"`
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

// Image is one produced image: a provider's URL, or (when the provider sent the image itself)
// the image as b64_json, as OpenAI's image API names it. Callbacks carry no b64_json: the
// image is fetched with GET. Once expired, neither is given and Expired says so.
type Image struct {
	URL       string `json:"url,omitempty"`
	B64JSON   string `json:"b64_json,omitempty"`
	MIMEType  string `json:"mime_type,omitempty"`
	ExpiresAt *int64 `json:"expires_at"`
	Expired   bool   `json:"expired,omitempty"`
	Width     int    `json:"width,omitempty"`
	Height    int    `json:"height,omitempty"`
}

// progressOf gives a progress when the provider says none: 0 until it runs, 50 while it runs
// (no provider reports a fraction we could trust), 100 when done.
func progressOf(st task.Status, reported int) int {
	switch {
	case st.Terminal():
		return 100
	case reported > 0:
		return min(reported, 99)
	case st == task.InProgress:
		return 50
	}
	return 0
}

// ObjectOf renders a task for its client as of now. Images are given inline (b64_json) when
// the task was read with their bytes (GetTask), never in callbacks.
func ObjectOf(t *store.Task, now time.Time) Object {
	o := Object{
		ID: t.ID, Object: t.Kind, Model: t.Model, Status: t.Status, Progress: t.Progress,
		CreatedAt: t.CreatedAt.Unix(), Provider: t.Provider, Route: t.Route, ProviderStatus: t.FamilyStatus,
	}
	if !t.CompletedAt.IsZero() {
		at := t.CompletedAt.Unix()
		o.CompletedAt = &at
	}
	if t.Error != nil {
		o.Error = &ObjectError{Code: t.Error.Code, Message: t.Error.Message}
	}
	var res Result
	if len(t.Videos) > 0 {
		res.Videos, o.ExpiresAt = videosOf(t.Videos, now)
		o.Size = size(t.Videos)
	}
	if len(t.Images) > 0 {
		var first *int64
		res.Images, first = imagesOf(t.Images, now)
		if o.ExpiresAt == nil || (first != nil && *first < *o.ExpiresAt) {
			o.ExpiresAt = first
		}
	}
	res.Text = t.Text
	if len(res.Videos) > 0 || len(res.Images) > 0 || res.Text != "" {
		o.Result = &res
	}
	if s := Seconds(t); s.IsPositive() {
		o.Seconds = s.String()
	}
	if t.Settled {
		c := t.Cost.String()
		o.Cost = &c
	}
	return o
}

// expiry renders at as expires_at and reports whether it has passed; first keeps the earliest.
func expiry(at time.Time, now time.Time, first **int64) (*int64, bool) {
	if at.IsZero() {
		return nil, false
	}
	u := at.Unix()
	if *first == nil || u < **first {
		*first = &u
	}
	return &u, !now.Before(at)
}

// videosOf renders the produced videos as of now: expired URLs are withheld. It returns the
// earliest expiry, which is the object's expires_at.
func videosOf(vs []store.TaskVideo, now time.Time) ([]Video, *int64) {
	var out []Video
	var first *int64
	for _, v := range vs {
		o := Video{URL: v.URL, Width: v.Width, Height: v.Height}
		if !v.Seconds.IsZero() {
			o.Seconds = v.Seconds.String()
		}
		if o.ExpiresAt, o.Expired = expiry(v.ExpiresAt, now, &first); o.Expired {
			o.URL = ""
		}
		out = append(out, o)
	}
	return out, first
}

// imagesOf renders the produced images as of now, like videosOf; an image kept by the gateway
// whose bytes are gone (pruned) is expired too.
func imagesOf(ims []store.TaskImage, now time.Time) ([]Image, *int64) {
	var out []Image
	var first *int64
	for _, im := range ims {
		o := Image{URL: im.URL, MIMEType: im.MIMEType, Width: im.Width, Height: im.Height}
		if im.Data != nil {
			o.B64JSON = base64.StdEncoding.EncodeToString(im.Data)
		}
		o.ExpiresAt, o.Expired = expiry(im.ExpiresAt, now, &first)
		if o.Expired {
			o.URL, o.B64JSON = "", ""
		}
		out = append(out, o)
	}
	return out, first
}

func size(vs []store.TaskVideo) string {
	if len(vs) == 0 || vs[0].Width == 0 || vs[0].Height == 0 {
		return ""
	}
	return strconv.Itoa(vs[0].Width) + "x" + strconv.Itoa(vs[0].Height)
}
