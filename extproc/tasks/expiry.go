package tasks

// How a task ends when its provider never ends it: it times out at max_age (task_timeout), or
// the provider no longer knows it (task_expired_or_unknown). Either way it fails like a task
// the provider failed: its hold is released, nothing is billed, its callback is sent. And how
// the provider's reading of the gateway's credential is reported (heard).

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/tollway/tollway/extproc/provider/task"
	"github.com/tollway/tollway/store"
)

const (
	// DefaultMaxAge is tasks.max_age's default: videos take minutes, and a provider that has not
	// finished in 6 hours will not.
	DefaultMaxAge = 6 * time.Hour
	// DefaultUnknownGrace is tasks.unknown_grace's default: a provider's query side may not know
	// a task for a few seconds after its create (eventual consistency); a minute of answers
	// that it does not is no such delay.
	DefaultUnknownGrace = time.Minute
	// UnknownConfirmations is the least number of answers in a row, spanning the grace, that
	// end a task its provider does not know.
	UnknownConfirmations = 3
)

func (s *Service) maxAge() time.Duration       { return cmp.Or(s.MaxAge, DefaultMaxAge) }
func (s *Service) unknownGrace() time.Duration { return cmp.Or(s.UnknownGrace, DefaultUnknownGrace) }

// deadline is when t times out: max_age after its stored created_at, so a restart changes
// nothing.
func (s *Service) deadline(t *store.Task) time.Time { return t.CreatedAt.Add(s.maxAge()) }

// timeoutEnd is the state that ends t at its deadline.
func (s *Service) timeoutEnd(t *store.Task) task.State {
	age := s.maxAge()
	s.Log.Warn("task timed out: its provider did not finish it within tasks.max_age; its hold is released and nothing is billed",
		"task", t.ID, "provider", t.Provider, "provider_task_id", t.ProviderTaskID, "max_age", age.String())
	return ended(t, "task_timeout", fmt.Sprintf("provider %s did not finish the task within tasks.max_age (%s) of its creation; nothing was billed", t.Provider, age))
}

// unknownEnd is the state that ends t after n answers over span saying its provider does not
// know it (why: the last of them).
func (s *Service) unknownEnd(t *store.Task, why error, n int, span time.Duration) task.State {
	s.Log.Warn("task ended: its provider does not know it (an unknown id, or results past the provider's retention)",
		"task", t.ID, "provider", t.Provider, "provider_task_id", t.ProviderTaskID, "answers", n, "over", span.Round(time.Second).String())
	return ended(t, "task_expired_or_unknown", fmt.Sprintf("provider %s answered %d times over %s that it does not know task %s (%v); nothing was billed",
		t.Provider, n, span.Round(time.Second), t.ProviderTaskID, why))
}

// ended is t failed with code and message, its provider's last status word kept.
func ended(t *store.Task, code, message string) task.State {
	return task.State{Status: task.Failed, FamilyStatus: t.FamilyStatus, Error: &task.Error{Code: code, Message: message}}
}

// heard reports what a provider's answer (err: its adapter's reading) says of the gateway's
// credential: refused (provider_auth_failed, in whatever HTTP status), or accepted (a task
// created; a query answered, even to say the task is unknown). Other failures say nothing.
func (s *Service) heard(name string, err error, query bool) {
	var te *task.Error
	switch {
	case errors.As(err, &te) && te.Code == "provider_auth_failed":
		if s.Refused != nil {
			s.Refused(name)
		}
	case err == nil || (query && errors.Is(err, task.ErrUnknown)):
		if s.Answered != nil {
			s.Answered(name)
		}
	}
}
