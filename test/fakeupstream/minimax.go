package fakeupstream

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The MiniMax video API (family V1): POST /v1/video_generation, GET
// /v1/query/video_generation?task_id=, GET /v1/files/retrieve?file_id=, Bearer auth. Like the
// real API it answers errors inside HTTP 200 (base_resp.status_code), advances a task one
// status per query (Preparing, Queueing, Processing, then Success or Fail), and serves the
// video from a download URL that expires.

// MiniMaxURL is the base URL a minimax provider config uses: the API host root.
func (s *Server) MiniMaxURL() string { return strings.TrimSuffix(s.url, "/v1") }

// Prompt triggers of the media fakes.
const (
	MediaFailTrigger        = "#fail-task"    // the task fails at the provider
	MediaCreateErrorTrigger = "#create-error" // the create is refused (MiniMax: HTTP 200, status_code 1002)
	// MediaNeverTrigger: the video fakes never finish the task (it stays running at every query).
	MediaNeverTrigger = "#never-finish"
	// MediaForgetTrigger: the video fakes accept the task and forget it at once, so every query
	// gets the API's answer for an id it does not know (MiniMax HTTP 200 with status_code 2013,
	// DashScope task_status UNKNOWN, Kling HTTP 404 code 1203).
	MediaForgetTrigger = "#forget-task"
)

// mediaURLTTL is how long a fake download URL works, unless Options.MediaURLTTL says.
const mediaURLTTL = time.Hour

type minimaxTask struct {
	polls   int
	fail    bool
	never   bool
	res     string
	created time.Time
}

var minimaxStatuses = []string{"Preparing", "Queueing", "Processing"}

type minimaxState struct {
	mu    sync.Mutex
	tasks map[string]*minimaxTask
}

func (s *Server) minimaxRoute(w http.ResponseWriter, r *http.Request, body []byte) bool {
	path := r.URL.Path
	switch {
	case path == "/v1/video_generation", path == "/v1/query/video_generation", path == "/v1/files/retrieve":
	case strings.HasPrefix(path, "/files/"):
		s.minimaxDownload(w, r)
		return true
	default:
		return false
	}
	if s.apiKey() != "" && r.Header.Get("Authorization") != "Bearer "+s.apiKey() {
		minimaxReply(w, map[string]any{}, 1004, "login fail: Please carry the API secret key in the 'Authorization' field of the request header")
		return true
	}
	s.mm.mu.Lock()
	defer s.mm.mu.Unlock()
	if s.mm.tasks == nil {
		s.mm.tasks = map[string]*minimaxTask{}
	}
	switch path {
	case "/v1/video_generation":
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return true
		}
		if replied, _ := s.applyFault(w, r, func(int) string { return "internal error" }, func(st int, msg string) {
			w.WriteHeader(st)
			_, _ = w.Write([]byte(`{"base_resp":{"status_code":1000,"status_msg":"` + msg + `"}}`))
		}); replied {
			return true
		}
		var req struct {
			Model      string `json:"model"`
			Prompt     string `json:"prompt"`
			Frame      string `json:"first_frame_image"`
			Duration   int    `json:"duration"`
			Resolution string `json:"resolution"`
		}
		if json.Unmarshal(body, &req) != nil || req.Model == "" || (req.Prompt == "" && req.Frame == "") {
			minimaxReply(w, map[string]any{"task_id": ""}, 2013, "invalid params, model and prompt or first_frame_image are required")
			return true
		}
		if req.Resolution == "1080P" && req.Duration == 10 {
			minimaxReply(w, map[string]any{"task_id": ""}, 2013, "invalid params, 1080P supports 6s only")
			return true
		}
		if strings.Contains(req.Prompt, MediaCreateErrorTrigger) {
			minimaxReply(w, map[string]any{"task_id": ""}, 1002, "rate limit exceeded(RPM)")
			return true
		}
		id := strconv.FormatInt(106916112212000+int64(s.seq.Add(1)), 10)
		if !strings.Contains(req.Prompt, MediaForgetTrigger) {
			s.mm.tasks[id] = &minimaxTask{fail: strings.Contains(req.Prompt, MediaFailTrigger), never: strings.Contains(req.Prompt, MediaNeverTrigger),
				res: req.Resolution, created: time.Now()}
		}
		minimaxReply(w, map[string]any{"task_id": id}, 0, "success")
	case "/v1/query/video_generation":
		id := r.URL.Query().Get("task_id")
		t := s.mm.tasks[id]
		if t == nil {
			minimaxReply(w, map[string]any{"task_id": id, "status": ""}, 2013, "invalid params, task not found")
			return true
		}
		out := map[string]any{"task_id": id}
		switch {
		case t.polls < len(minimaxStatuses) || t.never:
			out["status"] = minimaxStatuses[min(t.polls, len(minimaxStatuses)-1)]
		case t.fail:
			out["status"] = "Fail"
		default:
			out["status"], out["file_id"] = "Success", id+"0"
			out["video_width"], out["video_height"] = 1366, 768
			if t.res == "1080P" {
				out["video_width"], out["video_height"] = 1920, 1080
			}
		}
		t.polls++
		minimaxReply(w, out, 0, "success")
	case "/v1/files/retrieve":
		fid := r.URL.Query().Get("file_id")
		if s.mm.tasks[strings.TrimSuffix(fid, "0")] == nil || !strings.HasSuffix(fid, "0") {
			minimaxReply(w, map[string]any{}, 1013, "file not found")
			return true
		}
		n, _ := strconv.ParseInt(fid, 10, 64)
		now := time.Now()
		minimaxReply(w, map[string]any{"file": map[string]any{
			"file_id": n, "bytes": 5896337, "created_at": now.Unix(), "filename": "output.mp4", "purpose": "video_generation",
			"download_url": s.MiniMaxURL() + "/files/" + fid + ".mp4?expires=" + strconv.FormatInt(now.Add(s.mediaTTL()).Unix(), 10),
		}}, 0, "success")
	}
	return true
}

func (s *Server) mediaTTL() time.Duration {
	if s.opts.MediaURLTTL > 0 {
		return s.opts.MediaURLTTL
	}
	return mediaURLTTL
}

// minimaxDownload serves a video until its URL expires (403 after, as a CDN's signed URL).
func (s *Server) minimaxDownload(w http.ResponseWriter, r *http.Request) {
	exp, err := strconv.ParseInt(r.URL.Query().Get("expires"), 10, 64)
	if err != nil || time.Now().Unix() >= exp {
		http.Error(w, "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>", http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "video/mp4")
	_, _ = w.Write([]byte("\x00\x00\x00\x18ftypmp42fake video"))
}

func minimaxReply(w http.ResponseWriter, fields map[string]any, code int, msg string) {
	fields["base_resp"] = map[string]any{"status_code": code, "status_msg": msg}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(fields)
}
