package task

import (
	"errors"
	"strings"
	"testing"
)

// TestUnknownTaskAnswers: each family's answer for a task id the provider does not know (never
// issued, or past its retention) is ErrUnknown, not a failed task: right after a create a
// provider's query side may not know the task yet, so the lifecycle ends it only after repeated
// answers (tasks.Service). The error keeps the provider's own words.
func TestUnknownTaskAnswers(t *testing.T) {
	for _, c := range []struct {
		name   string
		ad     Adapter
		status int
		body   string
		words  string
	}{
		{"minimax", minimax{}, 200, `{"task_id":"106916112212999","status":"","base_resp":{"status_code":2013,"status_msg":"invalid params, task not found"}}`, "task not found"},
		{"dashscope video", dashscopeVideo{}, 200, `{"request_id":"r","output":{"task_id":"nope","task_status":"UNKNOWN"}}`, "UNKNOWN"},
		{"dashscope image", dashscopeImage{family: "I2"}, 200, `{"output":{"task_id":"nope","task_status":"UNKNOWN"},"usage":{}}`, "UNKNOWN"},
		{"kling video", kling{}, 404, `{"code":1203,"message":"task not found","request_id":"r"}`, "task not found"},
		{"kling image", klingImage{}, 404, `{"code":1203,"message":"task not found","request_id":"r"}`, "task not found"},
	} {
		st, err := c.ad.Queried(c.status, []byte(c.body))
		if !errors.Is(err, ErrUnknown) || st.Status.Terminal() || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%s: %+v %v", c.name, st, err)
		}
	}
	// MiniMax's 2013 on a create is the client's invalid request, not an unknown task.
	var te *Error
	if _, err := (minimax{}).Created(200, []byte(`{"task_id":"","base_resp":{"status_code":2013,"status_msg":"invalid params, 1080P supports 6s only"}}`)); !errors.As(err, &te) || te.Code != "invalid_request" || errors.Is(err, ErrUnknown) {
		t.Errorf("2013 at create: %v", err)
	}
	// Kling's other 4xx codes on a query stay errors of their own.
	if _, err := (kling{}).Queried(400, []byte(`{"code":1201,"message":"invalid params"}`)); err == nil || errors.Is(err, ErrUnknown) {
		t.Errorf("1201 on a query: %v", err)
	}
}
