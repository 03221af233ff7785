package fakeupstream

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The DashScope video API (family V2): POST
// /api/v1/services/aigc/video-generation/video-synthesis with X-DashScope-Async: enable (refused
// without it, as the real API does), GET /api/v1/tasks/{id}: PENDING, RUNNING, then SUCCEEDED
// with video_url (an OSS signed URL: ?Expires=unix), end_time (Beijing time, no zone, as
// DashScope writes it) and usage.duration, or FAILED; UNKNOWN (HTTP 200) for ids it does not
// know. Errors are {code, message, request_id} with an HTTP status; a text-to-video model's
// create without input.prompt is refused (400 InvalidParameter), as DashScope does.

// DashScopeReportTrigger followed by a number of seconds ("#report-seconds=1000") makes the
// task's SUCCEEDED answer report that usage.duration, whatever the video lasts: a provider
// over-reporting its usage.
const DashScopeReportTrigger = "#report-seconds="

// DashScopeURL is the base URL a dashscope provider config uses: the API host root.
func (s *Server) DashScopeURL() string { return strings.TrimSuffix(s.url, "/v1") }

type dashscopeState struct {
	mu    sync.Mutex
	tasks map[string]*dashscopeTask
}

type dashscopeTask struct {
	polls     int
	fail      bool
	never     bool
	unsigned  bool // its video URL carries no OSS signature (DashScopeUnsignedTrigger)
	duration  int
	reported  int // usage.duration when it is not the video's (DashScopeReportTrigger)
	cancelled bool
}

// DashScopeUnsignedTrigger makes the DashScope video fake answer with a video URL without an OSS
// signature (no Expires): its expiry is then 24 h after end_time.
const DashScopeUnsignedTrigger = "#unsigned-url"

// beijing is the zone DashScope writes its times in (end_time, submit_time), without saying so.
var beijing = time.FixedZone("UTC+8", 8*60*60)

// dashscopeNow is now as DashScope writes it: "2025-02-20 18:45:52.262", Beijing time.
func dashscopeNow() string { return time.Now().In(beijing).Format("2006-01-02 15:04:05.000") }

func (s *Server) dashscopeRoute(w http.ResponseWriter, r *http.Request, body []byte) bool {
	path := r.URL.Path
	if strings.HasPrefix(path, "/dashscope-videos/") {
		s.dashscopeDownload(w, r)
		return true
	}
	if path != "/api/v1/services/aigc/video-generation/video-synthesis" && !strings.HasPrefix(path, "/api/v1/tasks/") {
		return false
	}
	reqID := "ds-" + s.nextID()
	if s.apiKey() != "" && r.Header.Get("Authorization") != "Bearer "+s.apiKey() {
		dashscopeError(w, http.StatusUnauthorized, "InvalidApiKey", "Invalid API-key provided.", reqID)
		return true
	}
	s.ds.mu.Lock()
	defer s.ds.mu.Unlock()
	if s.ds.tasks == nil {
		s.ds.tasks = map[string]*dashscopeTask{}
	}
	if !strings.HasPrefix(path, "/api/v1/tasks/") {
		if r.Header.Get("X-DashScope-Async") != "enable" {
			dashscopeError(w, http.StatusForbidden, "AccessDenied", "current user api does not support synchronous calls", reqID)
			return true
		}
		if replied, _ := s.applyFault(w, r, func(int) string { return "internal error" }, func(st int, msg string) {
			dashscopeError(w, st, "InternalError", msg, reqID)
		}); replied {
			return true
		}
		var req struct {
			Model string `json:"model"`
			Input struct {
				Prompt string `json:"prompt"`
			} `json:"input"`
			Parameters struct {
				Duration int `json:"duration"`
			} `json:"parameters"`
		}
		if json.Unmarshal(body, &req) != nil || req.Model == "" {
			dashscopeError(w, http.StatusBadRequest, "InvalidParameter", "Model not exist.", reqID)
			return true
		}
		if strings.Contains(req.Model, "t2v") && req.Input.Prompt == "" {
			// A text-to-video model reads its prompt from input.prompt and nowhere else.
			dashscopeError(w, http.StatusBadRequest, "InvalidParameter", "Field required: input.prompt", reqID)
			return true
		}
		if req.Parameters.Duration == 0 {
			req.Parameters.Duration = 5
		}
		id := "ds-task-" + s.nextID()
		if p := req.Input.Prompt; !strings.Contains(p, MediaForgetTrigger) {
			t := &dashscopeTask{fail: strings.Contains(p, MediaFailTrigger), never: strings.Contains(p, MediaNeverTrigger),
				unsigned: strings.Contains(p, DashScopeUnsignedTrigger), duration: req.Parameters.Duration}
			if i := strings.Index(p, DashScopeReportTrigger); i >= 0 {
				t.reported, _ = strconv.Atoi(strings.Fields(p[i+len(DashScopeReportTrigger):] + " ")[0])
			}
			s.ds.tasks[id] = t
		}
		writeJSON(w, map[string]any{"request_id": reqID, "output": map[string]any{"task_id": id, "task_status": "PENDING"}})
		return true
	}
	id := strings.TrimPrefix(path, "/api/v1/tasks/")
	if id, ok := strings.CutSuffix(id, "/cancel"); ok && r.Method == http.MethodPost {
		// DashScope cancels a task only while it is PENDING.
		if t := s.ds.tasks[id]; t == nil || t.polls > 0 || t.cancelled {
			dashscopeError(w, http.StatusBadRequest, "UnsupportedOperation", "Failed to cancel the task, please confirm if the task is in PENDING status.", reqID)
		} else {
			t.cancelled = true
			writeJSON(w, map[string]any{"request_id": reqID})
		}
		return true
	}
	t := s.ds.tasks[id]
	out := map[string]any{"task_id": id}
	usage := map[string]any{}
	switch {
	case t == nil:
		out["task_status"] = "UNKNOWN"
	case t.cancelled:
		out["task_status"] = "CANCELED"
	case t.polls == 0:
		out["task_status"] = "PENDING"
	case t.polls < 3 || t.never:
		out["task_status"] = "RUNNING"
	case t.fail:
		out["task_status"], out["code"], out["message"] = "FAILED", "InternalError.Algo", "video generation failed"
	default:
		out["task_status"] = "SUCCEEDED"
		out["end_time"] = dashscopeNow()
		// An OSS signed URL, as DashScope's: it stops working at its Expires (unix seconds).
		out["video_url"] = s.DashScopeURL() + "/dashscope-videos/" + id + ".mp4"
		if !t.unsigned {
			out["video_url"] = out["video_url"].(string) + "?Expires=" + strconv.FormatInt(time.Now().Add(s.mediaTTL()).Unix(), 10) + "&OSSAccessKeyId=LTAIfake&Signature=fake%3D"
		}
		usage = map[string]any{"duration": cmp.Or(t.reported, t.duration), "video_count": 1}
	}
	if t != nil {
		t.polls++
	}
	writeJSON(w, map[string]any{"request_id": reqID, "output": out, "usage": usage})
	return true
}

// dashscopeDownload serves a video until its URL's Expires (403 after, as OSS does); an unsigned
// one always.
func (s *Server) dashscopeDownload(w http.ResponseWriter, r *http.Request) {
	if exp := r.URL.Query().Get("Expires"); exp != "" {
		if n, err := strconv.ParseInt(exp, 10, 64); err != nil || time.Now().Unix() >= n {
			http.Error(w, "<Error><Code>AccessDenied</Code><Message>Request has expired.</Message></Error>", http.StatusForbidden)
			return
		}
	}
	w.Header().Set("Content-Type", "video/mp4")
	_, _ = w.Write([]byte("\x00\x00\x00\x18ftypmp42fake video"))
}

func dashscopeError(w http.ResponseWriter, status int, code, msg, reqID string) {
	writeStatusJSON(w, status, map[string]any{"code": code, "message": msg, "request_id": reqID})
}

func writeStatusJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
