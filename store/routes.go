package store

import (
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucketRoutes = []byte("routes")

// Route is a model route (spec 2.5). ID is route:<slug of the name at creation> and never
// changes; the config file and the admin API both write routes.
type Route struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Rule      string            `json:"rule"`
	Models    []string          `json:"models,omitempty"`
	Modes     map[string]string `json:"modes,omitempty"`
	Status    string            `json:"status"`
	Source    Source            `json:"source"`
	CreatedAt time.Time         `json:"created_at"`
}

// Routes lists routes by id.
func (s *Store) Routes() ([]Route, error) {
	var out []Route
	err := s.db.View(func(tx *bolt.Tx) error {
		return eachJSON(tx.Bucket(bucketRoutes), func(r Route) { out = append(out, r) })
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// PutRoute creates or replaces a route. The creation time (and so the id) of an existing route
// is kept.
func (s *Store) PutRoute(r Route) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRoutes)
		var old Route
		if v := b.Get([]byte(r.ID)); v != nil && jsonUnmarshal(v, &old) == nil && !old.CreatedAt.IsZero() {
			r.CreatedAt = old.CreatedAt
		}
		if r.CreatedAt.IsZero() {
			r.CreatedAt = time.Now().UTC()
		}
		return putJSON(b, r.ID, r)
	})
}

// SetRouteStatus pauses or resumes a route.
func (s *Store) SetRouteStatus(id, status string) (Route, error) {
	var r Route
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRoutes)
		v := b.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("route %q: %w", id, ErrNotFound)
		}
		if err := jsonUnmarshal(v, &r); err != nil {
			return err
		}
		r.Status = status
		return putJSON(b, id, r)
	})
	return r, err
}

// routeRecords stamps config routes, keeping the creation time of routes already stored. For a
// route the file names, the file wins: pausing it through the admin API lasts until the file is
// next applied.
func routeRecords(b *bolt.Bucket, rs []Route) []sourced {
	recs := make([]sourced, len(rs))
	for i := range rs {
		rs[i].Source = SourceConfig
		var old Route
		if v := b.Get([]byte(rs[i].ID)); v != nil && jsonUnmarshal(v, &old) == nil {
			rs[i].CreatedAt = old.CreatedAt
		}
		if rs[i].CreatedAt.IsZero() {
			rs[i].CreatedAt = time.Now().UTC()
		}
		recs[i] = sourced{rs[i].ID, rs[i]}
	}
	return recs
}
