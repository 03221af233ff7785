package fakeupstream

import (
	"cmp"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The DashScope image APIs (families I2 and I2b), beside the video fake (dashscope.go):
//   - POST /api/v1/services/aigc/text2image/image-synthesis (Qwen-Image's asynchronous API:
//     input.prompt, models qwen-image and qwen-image-plus only, n 1);
//   - POST /api/v1/services/aigc/image-generation/generation (Wan image's asynchronous API:
//     input.messages);
//   - POST /api/v1/services/aigc/multimodal-generation/generation (the synchronous API:
//     input.messages, answered with the finished images).
//
// The asynchronous ones require X-DashScope-Async: enable and the synchronous one refuses it
// (403 AccessDenied, as DashScope does). Tasks are queried at GET /api/v1/tasks/{id} (ids this
// fake does not know fall through to the video fake, which answers UNKNOWN) and go PENDING,
// RUNNING, then SUCCEEDED with output.results[] (text2image) or output.choices[] (the messages
// APIs) and usage.image_count, or FAILED. A sequential set (enable_sequential) makes one image
// fewer than n (n defaults to 12), as the model decides how many a set needs: billing must read
// usage.image_count. Result URLs are OSS-style signed URLs (?Expires=unix) served as PNGs until
// then (Options.MediaURLTTL), then 403. Prompt triggers: MediaPolicyTrigger (400
// DataInspectionFailed at creation), MediaPolicyLateTrigger (the task FAILs inspection of its
// output), MediaCreateErrorTrigger (429 Throttling.RateQuota), MediaFailTrigger (the task FAILs;
// the synchronous API answers 500).

// MediaPolicyLateTrigger makes a DashScope image task fail its output's content inspection.
const MediaPolicyLateTrigger = "#policy-output"

const dashscopeImagePath = "/api/v1/services/aigc/"

type dashscopeImageState struct {
	mu    sync.Mutex
	tasks map[string]*dashscopeImageTask
}

type dashscopeImageTask struct {
	polls, images int
	fail, policy  bool
	results       bool // text2image's output.results shape, else output.choices
	size          string
}

var (
	qwenAsyncModels = []string{"qwen-image", "qwen-image-plus"}
	dsSizeRE        = regexp.MustCompile(`^([0-9]+)\*([0-9]+)$`)
)

func (s *Server) dashscopeImages() *dashscopeImageState {
	v, _ := dashscopeImageStates.LoadOrStore(s, &dashscopeImageState{tasks: map[string]*dashscopeImageTask{}})
	return v.(*dashscopeImageState)
}

// dashscopeImageRequest is what the fake reads of a create.
type dashscopeImageRequest struct {
	Model string `json:"model"`
	Input struct {
		Prompt   *string `json:"prompt"`
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Text  *string `json:"text"`
				Image *string `json:"image"`
			} `json:"content"`
		} `json:"messages"`
	} `json:"input"`
	Parameters struct {
		N                *int   `json:"n"`
		Size             string `json:"size"`
		EnableSequential bool   `json:"enable_sequential"`
	} `json:"parameters"`
}

func (s *Server) dashscopeImageRoute(w http.ResponseWriter, r *http.Request, body []byte) bool {
	path := r.URL.Path
	st := s.dashscopeImages()
	switch path {
	case dashscopeImagePath + "text2image/image-synthesis", dashscopeImagePath + "image-generation/generation", dashscopeImagePath + "multimodal-generation/generation":
	default:
		if strings.HasPrefix(path, "/dashscope-images/") {
			serveImage(w, r, r.URL.Query().Get("Expires"))
			return true
		}
		id, ok := strings.CutPrefix(path, "/api/v1/tasks/")
		st.mu.Lock()
		known := ok && st.tasks[id] != nil
		st.mu.Unlock()
		if !known {
			return false // the video fake's, or UNKNOWN there
		}
	}
	reqID := "dsi-" + s.nextID()
	if s.apiKey() != "" && r.Header.Get("Authorization") != "Bearer "+s.apiKey() {
		dashscopeError(w, http.StatusUnauthorized, "InvalidApiKey", "Invalid API-key provided.", reqID)
		return true
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if id, ok := strings.CutPrefix(path, "/api/v1/tasks/"); ok {
		s.dashscopeImageTask(w, id, st.tasks[id], reqID)
		return true
	}
	direct := path == dashscopeImagePath+"multimodal-generation/generation"
	switch async := r.Header.Get("X-DashScope-Async") == "enable"; {
	case direct && async:
		dashscopeError(w, http.StatusForbidden, "AccessDenied", "current user api does not support asynchronous calls", reqID)
		return true
	case !direct && !async:
		dashscopeError(w, http.StatusForbidden, "AccessDenied", "current user api does not support synchronous calls", reqID)
		return true
	}
	if replied, _ := s.applyFault(w, r, func(int) string { return "An internal error has occured, please try again later." }, func(status int, msg string) {
		code := "InternalError"
		if status == http.StatusTooManyRequests {
			code = "Throttling.RateQuota"
		}
		dashscopeError(w, status, code, msg, reqID)
	}); replied {
		return true
	}
	var req dashscopeImageRequest
	if json.Unmarshal(body, &req) != nil || req.Model == "" {
		dashscopeError(w, http.StatusBadRequest, "InvalidParameter", "Model not exist.", reqID)
		return true
	}
	t := &dashscopeImageTask{images: 1, results: path == dashscopeImagePath+"text2image/image-synthesis"}
	prompt, bad := "", ""
	if t.results {
		switch {
		case !slices.Contains(qwenAsyncModels, req.Model):
			bad = "Model not exist."
		case req.Input.Prompt == nil || len(req.Input.Messages) > 0:
			bad = "Field required: input.prompt"
		case req.Parameters.N != nil && *req.Parameters.N != 1:
			bad = "The parameter n must be 1"
		default:
			prompt = *req.Input.Prompt
		}
		t.size = cmp.Or(req.Parameters.Size, "1328*1328")
	} else {
		if len(req.Input.Messages) != 1 || req.Input.Messages[0].Role != "user" || req.Input.Prompt != nil {
			bad = "Field required: input.messages (one user message)"
		} else {
			for _, c := range req.Input.Messages[0].Content {
				if c.Text != nil {
					prompt = *c.Text
				}
			}
		}
		switch {
		case req.Parameters.EnableSequential && req.Parameters.N == nil:
			t.images = 11 // n defaults to 12 for a set; the model makes what it needs
		case req.Parameters.EnableSequential:
			t.images = max(*req.Parameters.N-1, 1)
		case req.Parameters.N != nil:
			t.images = *req.Parameters.N
		}
		t.size = map[string]string{"": "2048*2048", "1K": "1024*1024", "2K": "2048*2048", "4K": "4096*4096"}[req.Parameters.Size]
		if t.size == "" {
			t.size = req.Parameters.Size
		}
	}
	switch {
	case bad != "":
		dashscopeError(w, http.StatusBadRequest, "InvalidParameter", bad, reqID)
		return true
	case strings.TrimSpace(prompt) == "":
		dashscopeError(w, http.StatusBadRequest, "InvalidParameter", "The prompt is required.", reqID)
		return true
	case strings.Contains(prompt, MediaPolicyLateTrigger):
		t.policy = true
	case strings.Contains(prompt, MediaPolicyTrigger):
		dashscopeError(w, http.StatusBadRequest, "DataInspectionFailed", "Input data may contain inappropriate content.", reqID)
		return true
	case strings.Contains(prompt, MediaCreateErrorTrigger):
		dashscopeError(w, http.StatusTooManyRequests, "Throttling.RateQuota", "Requests rate limit exceeded, please try again later.", reqID)
		return true
	case strings.Contains(prompt, MediaFailTrigger) && direct:
		dashscopeError(w, http.StatusInternalServerError, "InternalError.Algo", "An internal error has occured during execution.", reqID)
		return true
	}
	t.fail = strings.Contains(prompt, MediaFailTrigger)
	if direct && t.policy {
		dashscopeError(w, http.StatusBadRequest, "DataInspectionFailed", "Output data may contain inappropriate content.", reqID)
		return true
	}
	if direct {
		out, usage := s.dashscopeImageResult("sync"+s.nextID(), t)
		writeJSON(w, map[string]any{"request_id": reqID, "output": out, "usage": usage})
		return true
	}
	id := "dsi-task-" + s.nextID()
	st.tasks[id] = t
	writeJSON(w, map[string]any{"request_id": reqID, "output": map[string]any{"task_id": id, "task_status": "PENDING"}})
	return true
}

// dashscopeImageTask answers a query of task id t.
func (s *Server) dashscopeImageTask(w http.ResponseWriter, id string, t *dashscopeImageTask, reqID string) {
	out := map[string]any{"task_id": id, "submit_time": dashscopeNow()}
	usage := map[string]any{}
	switch {
	case t.polls == 0:
		out["task_status"] = "PENDING"
	case t.polls < 3:
		out["task_status"] = "RUNNING"
	case t.fail:
		out["task_status"], out["code"], out["message"] = "FAILED", "InternalError.Algo", "An internal error has occured during execution."
	case t.policy:
		out["task_status"], out["code"], out["message"] = "FAILED", "DataInspectionFailed", "Output data may contain inappropriate content."
	default:
		out, usage = s.dashscopeImageResult(id, t)
		out["task_id"], out["task_status"] = id, "SUCCEEDED"
	}
	if t.polls >= 3 {
		out["end_time"] = dashscopeNow()
	}
	t.polls++
	writeJSON(w, map[string]any{"request_id": reqID, "output": out, "usage": usage})
}

// dashscopeImageResult is the output and usage of a finished task t, in its API's shape.
func (s *Server) dashscopeImageResult(id string, t *dashscopeImageTask) (map[string]any, map[string]any) {
	exp := strconv.FormatInt(time.Now().Add(s.mediaTTL()).Unix(), 10)
	var urls []string
	for i := range t.images {
		urls = append(urls, s.DashScopeURL()+"/dashscope-images/"+id+"-"+strconv.Itoa(i)+".png?Expires="+exp+"&OSSAccessKeyId=LTAIfake&Signature=fake%3D")
	}
	out := map[string]any{}
	usage := map[string]any{"image_count": len(urls)}
	if t.results {
		var results []any
		for _, u := range urls {
			results = append(results, map[string]any{"orig_prompt": "p", "actual_prompt": "p, extended", "url": u})
		}
		out["results"] = results
		out["task_metrics"] = map[string]any{"TOTAL": len(urls), "SUCCEEDED": len(urls), "FAILED": 0}
	} else {
		var content []any
		for _, u := range urls {
			content = append(content, map[string]any{"image": u, "type": "image"})
		}
		out["choices"] = []any{map[string]any{"finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}}
		out["finished"] = true
		usage["size"] = t.size
	}
	if m := dsSizeRE.FindStringSubmatch(t.size); m != nil && t.results {
		w, _ := strconv.Atoi(m[1])
		h, _ := strconv.Atoi(m[2])
		usage["width"], usage["height"] = w, h
	}
	return out, usage
}
