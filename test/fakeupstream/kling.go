package fakeupstream

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The Kling video API (family V3): POST /v1/videos/text2video, GET
// /v1/videos/text2video/{id}, authenticated by a JWT the caller signs (HS256, iss = access
// key, with exp and nbf) with its secret key: a missing, expired or wrongly signed token is
// refused with 401 and Kling's codes. A plain model field is ignored (Kling reads model_name;
// without it the task runs kling-v1); duration must be a string. Tasks go submitted,
// processing, then succeed (or failed).

// KlingURL is the base URL a kling provider config uses: the API host root.
func (s *Server) KlingURL() string { return strings.TrimSuffix(s.url, "/v1") }

type klingState struct {
	mu     sync.Mutex
	tasks  map[string]*klingTask
	models []string // model_name each task ran with, for tests
}

type klingTask struct {
	polls    int
	fail     bool
	never    bool
	duration string
}

// KlingModels lists the model each created task ran with ("kling-v1" when model_name was absent).
func (s *Server) KlingModels() []string {
	s.kl.mu.Lock()
	defer s.kl.mu.Unlock()
	return append([]string(nil), s.kl.models...)
}

func (s *Server) klingRoute(w http.ResponseWriter, r *http.Request, body []byte) bool {
	path := r.URL.Path
	if path != "/v1/videos/text2video" && !strings.HasPrefix(path, "/v1/videos/text2video/") {
		return false
	}
	reqID := "kl-" + s.nextID()
	if code, msg := s.klingAuth(r); code != 0 {
		writeStatusJSON(w, http.StatusUnauthorized, map[string]any{"code": code, "message": msg, "request_id": reqID})
		return true
	}
	s.kl.mu.Lock()
	defer s.kl.mu.Unlock()
	if s.kl.tasks == nil {
		s.kl.tasks = map[string]*klingTask{}
	}
	if path == "/v1/videos/text2video" {
		if replied, _ := s.applyFault(w, r, func(int) string { return "internal error" }, func(st int, msg string) {
			writeStatusJSON(w, st, map[string]any{"code": 5000, "message": msg, "request_id": reqID})
		}); replied {
			return true
		}
		var req struct {
			ModelName string          `json:"model_name"`
			Prompt    string          `json:"prompt"`
			Duration  json.RawMessage `json:"duration"`
		}
		_ = json.Unmarshal(body, &req)
		dur := "5"
		if len(req.Duration) > 0 && json.Unmarshal(req.Duration, &dur) != nil {
			writeStatusJSON(w, http.StatusBadRequest, map[string]any{"code": 1201, "message": "duration must be a string", "request_id": reqID})
			return true
		}
		if req.ModelName == "" {
			req.ModelName = "kling-v1" // a plain model field is not read
		}
		s.kl.models = append(s.kl.models, req.ModelName)
		id := strconv.FormatUint(780000000000+s.seq.Add(1), 10)
		if !strings.Contains(req.Prompt, MediaForgetTrigger) {
			s.kl.tasks[id] = &klingTask{fail: strings.Contains(req.Prompt, MediaFailTrigger), never: strings.Contains(req.Prompt, MediaNeverTrigger), duration: dur}
		}
		writeJSON(w, map[string]any{"code": 0, "message": "SUCCEED", "request_id": reqID,
			"data": map[string]any{"task_id": id, "task_status": "submitted", "created_at": time.Now().UnixMilli()}})
		return true
	}
	id := strings.TrimPrefix(path, "/v1/videos/text2video/")
	t := s.kl.tasks[id]
	if t == nil {
		writeStatusJSON(w, http.StatusNotFound, map[string]any{"code": 1203, "message": "task not found", "request_id": reqID})
		return true
	}
	data := map[string]any{"task_id": id}
	switch {
	case t.polls == 0:
		data["task_status"] = "submitted"
	case t.polls < 3 || t.never:
		data["task_status"] = "processing"
	case t.fail:
		data["task_status"], data["task_status_msg"] = "failed", "Failure to pass the risk control system"
	default:
		data["task_status"] = "succeed"
		data["task_result"] = map[string]any{"videos": []any{map[string]any{"id": "v" + id,
			"url": s.KlingURL() + "/files/" + id + ".mp4?expires=" + strconv.FormatInt(time.Now().Add(s.mediaTTL()).Unix(), 10), "duration": t.duration}}}
	}
	t.polls++
	writeJSON(w, map[string]any{"code": 0, "message": "SUCCEED", "request_id": reqID, "data": data})
	return true
}

// klingAuth checks the bearer JWT as Kling does; 0 means it passes.
func (s *Server) klingAuth(r *http.Request) (int, string) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || raw == "" {
		return 1001, "Authorization is empty"
	}
	claims := jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return []byte(s.opts.KlingSecretKey), nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
	switch {
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenNotValidYet):
		return 1004, "Authorization is expired"
	case err != nil:
		return 1002, "Authorization is invalid"
	case claims.Issuer != s.opts.KlingAccessKey:
		return 1003, "Authorization is not valid (unknown access key)"
	}
	return 0, ""
}
