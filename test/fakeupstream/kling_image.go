package fakeupstream

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Kling image API (family I1): POST /v1/images/generations, GET
// /v1/images/generations/{id}, behind the same JWT check as the video API (kling.go). Like the
// real API it reads model_name (a plain model field is ignored: the task runs kling-v1), checks
// n (1 to 9), aspect_ratio and prompt with code 1201, answers an unknown task id with HTTP 404
// code 1203, and moves a task from submitted through processing to succeed with n images
// (task_result.images[{index, url}]) or failed. Prompt triggers: MediaFailTrigger fails the task,
// MediaPolicyTrigger is refused by content policy (1301), MediaCreateErrorTrigger is refused as
// over the account's concurrency (HTTP 429, 1303). The image URLs are served as PNGs until they
// expire (Options.MediaURLTTL), then 403.

// MediaPolicyTrigger in a prompt makes the image fakes refuse it by content policy.
const MediaPolicyTrigger = "#policy"

// The image fakes' state hangs off the Server by pointer: its struct is shared, so these
// families keep theirs beside it.
var (
	klingImageStates     sync.Map // *Server -> *klingImageState
	dashscopeImageStates sync.Map // *Server -> *dashscopeImageState
)

type klingImageState struct {
	mu     sync.Mutex
	tasks  map[string]*klingImageTask
	models []string
}

type klingImageTask struct {
	polls, n int
	fail     bool
}

var klingImageRatios = []string{"16:9", "9:16", "1:1", "4:3", "3:4", "3:2", "2:3", "21:9"}

func (s *Server) klingImages() *klingImageState {
	v, _ := klingImageStates.LoadOrStore(s, &klingImageState{tasks: map[string]*klingImageTask{}})
	return v.(*klingImageState)
}

// KlingImageModels lists the model each created image task ran with ("kling-v1" when
// model_name was absent).
func (s *Server) KlingImageModels() []string {
	st := s.klingImages()
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.models...)
}

func (s *Server) klingImageRoute(w http.ResponseWriter, r *http.Request, body []byte) bool {
	const create = "/v1/images/generations"
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/kling-images/"):
		serveImage(w, r, r.URL.Query().Get("expires"))
		return true
	case path != create && !strings.HasPrefix(path, create+"/"):
		return false
	}
	reqID := "kl-" + s.nextID()
	fail := func(status, code int, msg string) {
		writeStatusJSON(w, status, map[string]any{"code": code, "message": msg, "request_id": reqID})
	}
	if code, msg := s.klingAuth(r); code != 0 {
		fail(http.StatusUnauthorized, code, msg)
		return true
	}
	st := s.klingImages()
	st.mu.Lock()
	defer st.mu.Unlock()
	if path == create {
		if r.Method != http.MethodPost {
			fail(http.StatusNotFound, 1202, "The requested method is invalid")
			return true
		}
		if replied, _ := s.applyFault(w, r, func(int) string { return "internal error" }, func(status int, msg string) {
			fail(status, klingFaultCode(status), msg)
		}); replied {
			return true
		}
		var req struct {
			ModelName   string          `json:"model_name"`
			Prompt      string          `json:"prompt"`
			N           json.RawMessage `json:"n"`
			AspectRatio *string         `json:"aspect_ratio"`
		}
		if json.Unmarshal(body, &req) != nil {
			fail(http.StatusBadRequest, 1200, "Invalid request parameters: body is not JSON")
			return true
		}
		n := 1
		switch {
		case len(req.N) > 0 && (json.Unmarshal(req.N, &n) != nil || n < 1 || n > 9):
			fail(http.StatusBadRequest, 1201, "Invalid parameters: n must be an integer in [1,9]")
		case req.AspectRatio != nil && !slices.Contains(klingImageRatios, *req.AspectRatio):
			fail(http.StatusBadRequest, 1201, "Invalid parameters: aspect_ratio "+*req.AspectRatio+" is not supported")
		case strings.TrimSpace(req.Prompt) == "":
			fail(http.StatusBadRequest, 1201, "Invalid parameters: prompt is required")
		case strings.Contains(req.Prompt, MediaPolicyTrigger):
			fail(http.StatusBadRequest, 1301, "Failure to pass the risk control system")
		case strings.Contains(req.Prompt, MediaCreateErrorTrigger):
			fail(http.StatusTooManyRequests, 1303, "Parallel task over resource pack limit")
		default:
			if req.ModelName == "" {
				req.ModelName = "kling-v1" // a plain model field is not read
			}
			st.models = append(st.models, req.ModelName)
			id := "CjImg" + strconv.FormatUint(s.seq.Add(1), 10)
			st.tasks[id] = &klingImageTask{n: n, fail: strings.Contains(req.Prompt, MediaFailTrigger)}
			now := time.Now().UnixMilli()
			writeJSON(w, map[string]any{"code": 0, "message": "SUCCEED", "request_id": reqID, "data": map[string]any{
				"task_id": id, "task_status": "submitted", "task_info": map[string]any{"external_task_id": ""}, "created_at": now, "updated_at": now}})
		}
		return true
	}
	id := strings.TrimPrefix(path, create+"/")
	t := st.tasks[id]
	if t == nil || r.Method != http.MethodGet {
		fail(http.StatusNotFound, 1203, "The requested resource does not exist: task "+id)
		return true
	}
	data := map[string]any{"task_id": id, "task_status_msg": "", "created_at": time.Now().UnixMilli()}
	switch {
	case t.polls == 0:
		data["task_status"] = "submitted"
	case t.polls < 3:
		data["task_status"] = "processing"
	case t.fail:
		data["task_status"], data["task_status_msg"] = "failed", "Failure to pass the risk control system"
	default:
		exp := strconv.FormatInt(time.Now().Add(s.mediaTTL()).Unix(), 10)
		var images []any
		for i := range t.n {
			images = append(images, map[string]any{"index": i, "url": s.KlingURL() + "/kling-images/" + id + "-" + strconv.Itoa(i) + ".png?expires=" + exp})
		}
		data["task_status"], data["task_result"] = "succeed", map[string]any{"images": images}
	}
	t.polls++
	writeJSON(w, map[string]any{"code": 0, "message": "SUCCEED", "request_id": reqID, "data": data})
	return true
}

// klingFaultCode is Kling's code for a scripted failure's status.
func klingFaultCode(status int) int {
	switch {
	case status == http.StatusTooManyRequests:
		return 1302
	case status == http.StatusUnauthorized:
		return 1002
	case status >= 500:
		return 5000
	}
	return 1200
}

// fakePNG is what every fake image URL serves: a small real PNG.
var fakePNG = func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := range 8 {
		img.Set(i, i, color.RGBA{R: 200, A: 255})
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}()

// serveImage serves fakePNG until the unix time expires, then refuses as a CDN's signed URL
// does.
func serveImage(w http.ResponseWriter, r *http.Request, expires string) {
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil || time.Now().Unix() >= exp {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("<Error><Code>AccessDenied</Code><Message>Request has expired.</Message></Error>"))
		return
	}
	w.Header().Set("Content-Type", "image/png")
	_, _ = w.Write(fakePNG)
}
