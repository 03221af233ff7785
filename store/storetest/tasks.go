package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/store"
)

func task(id, acct string) *store.Task {
	return &store.Task{ID: id, Kind: "video", Account: acct, KeyID: "key_1", RequestID: "req-" + id, Model: "clip", Family: "V1",
		Provider: "p", ProviderTaskID: "pt-" + id, Status: "queued", Hold: dec("0.5"), CreatedAt: day0, UpdatedAt: day0}
}

// taskCases: Tasks and Callbacks.
var taskCases = []conformance{
	{"tasks/create-read-list", func(t *testing.T, e *env) {
		s := e.s
		for _, id := range []string{"video_b", "video_a", "video_c"} {
			if err := s.PutTaskChange(task(id, "acme"), store.TaskChange{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutTaskChange(task("video_a", "acme"), store.TaskChange{}); !errors.Is(err, store.ErrExists) {
			t.Fatalf("a second video_a: %v", err)
		}
		bad := task("video_x", "acme")
		bad.ProviderTaskID = ""
		if err := s.PutTaskChange(bad, store.TaskChange{}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a task without its provider's id: %v", err)
		}
		if _, err := s.GetTask("video_none"); !errors.Is(err, store.ErrTaskNotFound) {
			t.Fatalf("GetTask of an absent task: %v", err)
		}
		img := task("image_1", "acme")
		img.Kind, img.Status, img.CompletedAt = "image", "completed", day0
		img.Images = []store.TaskImage{{MIMEType: "image/png", ExpiresAt: day0.Add(time.Hour), Data: []byte("png bytes")}}
		if err := s.PutTaskChange(img, store.TaskChange{}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetTask("image_1")
		if err != nil || len(got.Images) != 1 || string(got.Images[0].Data) != "png bytes" || got.Images[0].MIMEType != "image/png" {
			t.Fatalf("GetTask of an image: %+v %v", got, err)
		}
		open, err := s.OpenTasks(2, "")
		if err != nil || len(open) != 2 || open[0].ID != "video_a" || open[1].ID != "video_b" {
			t.Fatalf("OpenTasks(2): %+v %v", open, err)
		}
		if open, err = s.OpenTasks(10, "video_b"); err != nil || len(open) != 1 || open[0].ID != "video_c" {
			t.Fatalf("OpenTasks after video_b: %+v %v", open, err)
		}
	}},
	{"tasks/an-end-bills-once-with-its-callback", func(t *testing.T, e *env) {
		s := e.s
		account(t, s, "acme", "2")
		tk := task("video_1", "acme")
		tk.CallbackURL = "https://hooks.example/t"
		if err := s.PutTaskChange(tk, store.TaskChange{}); err != nil {
			t.Fatal(err)
		}
		end := func(r *store.Task) (store.TaskChange, error) {
			r.Status, r.Cost, r.Settled, r.CompletedAt = "completed", dec("0.4"), true, day0.Add(time.Minute)
			u := store.UsageRecord{RequestID: r.RequestID + "." + r.ID, KeyID: r.KeyID, Account: r.Account, Model: r.Model, Cost: r.Cost, Time: day0}
			return store.TaskChange{Usage: &u, Callbacks: []store.Callback{{TaskID: r.ID, Account: r.Account, URL: r.CallbackURL, Body: []byte(`{"status":"completed"}`)}}}, nil
		}
		for range 2 { // the same end twice: one bill
			if _, err := s.UpdateTask("video_1", end); err != nil {
				t.Fatal(err)
			}
		}
		wantDec(t, "balance", balance(t, s, "acme"), "1.6")
		if open, err := s.OpenTasks(10, ""); err != nil || len(open) != 0 {
			t.Fatalf("a completed task is still open: %+v %v", open, err)
		}
		if n := len(due(t, s, time.Now().Add(time.Hour))); n != 2 {
			t.Fatalf("%d callbacks in the outbox, want 2", n)
		}
		if _, err := s.UpdateTask("video_none", end); !errors.Is(err, store.ErrTaskNotFound) {
			t.Fatalf("UpdateTask of an absent task: %v", err)
		}
		refuse := errors.New("refused")
		if _, err := s.UpdateTask("video_1", func(*store.Task) (store.TaskChange, error) { return store.TaskChange{}, refuse }); !errors.Is(err, refuse) {
			t.Fatalf("fn's own error: %v", err)
		}
	}},
	{"tasks/a-refused-bill-does-not-hold-back-the-task", func(t *testing.T, e *env) {
		s := e.s
		if err := s.PutTaskChange(task("video_1", "gone"), store.TaskChange{}); err != nil {
			t.Fatal(err)
		}
		out, err := s.UpdateTask("video_1", func(r *store.Task) (store.TaskChange, error) {
			r.Status = "completed"
			u := store.UsageRecord{RequestID: "bill", KeyID: "key_1", Account: "gone", Model: "clip", Cost: dec("1"), Time: day0}
			return store.TaskChange{Usage: &u}, nil
		})
		if !errors.Is(err, store.ErrUsageNotSettled) || out == nil || out.Status != "completed" {
			t.Fatalf("a bill for an absent account: %+v %v", out, err)
		}
		if got, err := s.GetTask("video_1"); err != nil || got.Status != "completed" {
			t.Fatalf("the task after its bill was refused: %+v %v", got, err)
		}
	}},
	{"callbacks/due-retried-acked", func(t *testing.T, e *env) {
		s := e.s
		var cbs []store.Callback
		for i := range 3 {
			cbs = append(cbs, store.Callback{TaskID: "video_1", Account: "acme", URL: "https://hooks.example/" + fmt.Sprint(i), Body: []byte("{}"),
				NextAt: day0.Add(time.Duration(i) * time.Minute)})
		}
		tk := task("video_1", "acme")
		if err := s.PutTaskChange(tk, store.TaskChange{Callbacks: cbs}); err != nil {
			t.Fatal(err)
		}
		got := due(t, s, day0.Add(90*time.Second))
		if len(got) != 2 || !strings.HasSuffix(got[0].URL, "/0") || got[0].ID == "" || got[0].CreatedAt.IsZero() {
			t.Fatalf("due at 90 s: %+v", got)
		}
		var skipped []string
		if err := s.ScanDueCallbacks(day0.Add(time.Hour), 10, func(id string) bool { skipped = append(skipped, id); return id == got[0].ID },
			func(c store.Callback) bool { return c.ID != got[1].ID }); err != nil {
			t.Fatal(err)
		}
		if len(skipped) != 2 {
			t.Fatalf("the scan stopped after %d callbacks, want 2 (take returned false at the second)", len(skipped))
		}
		if err := s.RetryCallback(got[0], day0.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.AckCallback(got[1]); err != nil {
			t.Fatal(err)
		}
		left := due(t, s, day0.Add(3*time.Hour))
		if len(left) != 2 || left[1].ID != got[0].ID || left[1].Attempt != 1 || !left[1].NextAt.Equal(day0.Add(2*time.Hour)) {
			t.Fatalf("after a retry and an ack: %+v", left)
		}
		bad := store.TaskChange{Callbacks: []store.Callback{{TaskID: "video_2", URL: ""}}}
		if err := s.PutTaskChange(task("video_2", "acme"), bad); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a callback without a URL: %v", err)
		}
		sec, err := s.CallbackSecret("acme")
		again, err2 := s.CallbackSecret("acme")
		other, err3 := s.CallbackSecret("other")
		if err != nil || err2 != nil || err3 != nil || !strings.HasPrefix(sec, "whsec_") || sec != again || sec == other {
			t.Fatalf("callback secrets %q %q %q: %v %v %v", sec, again, other, err, err2, err3)
		}
	}},
}

// due lists every callback due at now.
func due(t *testing.T, s store.Store, now time.Time) []store.Callback {
	t.Helper()
	var out []store.Callback
	if err := s.ScanDueCallbacks(now, 1000, func(string) bool { return false }, func(c store.Callback) bool {
		out = append(out, c)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
