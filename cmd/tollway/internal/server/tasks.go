package server

import (
	"github.com/tollway/tollway/extproc/tasks"
	"github.com/tollway/tollway/store"
)

// polledTasks is the store's tasks as far as this replica polls them: OpenTasks lists only the
// running tasks it leased at start, so it holds again the credits of those alone.
type polledTasks struct {
	store.Tasks
	svc *tasks.Service
}

// OpenTasks lists up to limit running tasks this replica polls, in id order after after.
func (p polledTasks) OpenTasks(limit int, after string) ([]store.Task, error) {
	var out []store.Task
	for len(out) < limit {
		page, err := p.Tasks.OpenTasks(limit, after)
		if err != nil {
			return out, err
		}
		for _, t := range page {
			after = t.ID
			if p.svc.Polls(t.ID) && len(out) < limit {
				out = append(out, t)
			}
		}
		if len(page) < limit {
			break
		}
	}
	return out, nil
}
