package bbolt

import (
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

var bucketRoutes = []byte("routes")

// Routes lists routes by id.
func (s *Store) Routes() ([]store.Route, error) {
	var out []store.Route
	err := s.db.View(func(tx *bolt.Tx) error {
		return eachJSON(tx.Bucket(bucketRoutes), func(r store.Route) { out = append(out, r) })
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// PutRoute creates or replaces a route. The creation time (and so the id) of an existing route
// is kept.
func (s *Store) PutRoute(r store.Route) error {
	return s.catalogUpdate(r.ID, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRoutes)
		var old store.Route
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
func (s *Store) SetRouteStatus(id, status string) (store.Route, error) {
	return s.changeRoute(id, func(r *store.Route) { r.Status = status })
}

// ChangeRouteRateLimits changes the rates c names of a route, in one transaction, so a
// concurrent change of another rate is kept.
func (s *Store) ChangeRouteRateLimits(id string, c store.RatesChange) (store.Route, error) {
	if err := c.Check(); err != nil {
		return store.Route{}, err
	}
	return s.changeRoute(id, func(r *store.Route) { r.RateLimits = c.Apply(r.RateLimits) })
}

// changeRoute changes the stored route id in one transaction.
func (s *Store) changeRoute(id string, change func(*store.Route)) (store.Route, error) {
	var r store.Route
	err := s.catalogUpdate(id, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRoutes)
		v := b.Get([]byte(id))
		if v == nil {
			return fmt.Errorf("route %q: %w", id, store.ErrNotFound)
		}
		if err := jsonUnmarshal(v, &r); err != nil {
			return err
		}
		change(&r)
		return putJSON(b, id, r)
	})
	return r, err
}

// routeRecords stamps config routes, keeping the creation time of routes already stored. For a
// route the file names, the file wins: pausing it through the admin API lasts until the file is
// next applied.
func routeRecords(b *bolt.Bucket, rs []store.Route) []sourced {
	recs := make([]sourced, len(rs))
	for i := range rs {
		rs[i].Source = store.SourceConfig
		var old store.Route
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
