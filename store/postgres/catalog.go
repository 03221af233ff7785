package postgres

// The catalog: providers, models and routes, each row the record's JSON with its key and
// source in columns. Every write announces itself (TopicCatalog) in its transaction.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollway/tollway/store"
)

// querier is what reads need: the pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ querier = (*pgxpool.Pool)(nil)

// docs reads the JSON column of each row sql selects into a T.
func docs[T any](ctx context.Context, q querier, sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) {
		var v []byte
		var t T
		if err := r.Scan(&v); err != nil {
			return t, err
		}
		return t, decode(v, &t)
	})
}

// doc reads the one row sql selects; found is false when there is none.
func doc[T any](ctx context.Context, q querier, sql string, args ...any) (t T, found bool, err error) {
	ts, err := docs[T](ctx, q, sql, args...)
	if err != nil || len(ts) == 0 {
		return t, false, err
	}
	return ts[0], true, nil
}

func decode(v []byte, out any) error {
	if err := json.Unmarshal(v, out); err != nil {
		return store.Errorf(store.ErrInvalid, "store: a stored record does not decode: %v", err)
	}
	return nil
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // the store's own types always encode
		panic(fmt.Sprintf("store: encode %T: %v", v, err))
	}
	return b
}

// Catalog reads every provider, model and route at one point in time, each list sorted.
func (s *Store) Catalog() (store.Catalog, error) {
	var c store.Catalog
	err := s.tx(func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "set transaction isolation level repeatable read, read only"); err != nil {
			return err
		}
		var err error
		if c.Providers, err = docs[store.Provider](ctx, tx, `select doc from providers order by name collate "C"`); err != nil {
			return err
		}
		if c.Models, err = docs[store.Model](ctx, tx, `select doc from models order by id collate "C"`); err != nil {
			return err
		}
		c.Routes, err = routes(ctx, tx)
		return err
	})
	return c, err
}

func routes(ctx context.Context, q querier) ([]store.Route, error) {
	return docs[store.Route](ctx, q, `select doc from routes order by id collate "C"`)
}

// ReplaceConfig makes the config-owned records equal to c in one transaction: records the file
// no longer names are deleted, admin-owned ones are left alone unless the file names them; a
// stored route keeps its creation time.
func (s *Store) ReplaceConfig(c store.Catalog) error {
	return s.catalogTx("", func(ctx context.Context, tx pgx.Tx) error {
		names := make([]string, len(c.Providers))
		for i := range c.Providers {
			c.Providers[i].Source, names[i] = store.SourceConfig, c.Providers[i].Name
		}
		if _, err := tx.Exec(ctx, "delete from providers where source = 'config' and name <> all($1)", names); err != nil {
			return err
		}
		ids := make([]string, len(c.Models))
		for i := range c.Models {
			c.Models[i].Source, ids[i] = store.SourceConfig, c.Models[i].ID
		}
		if _, err := tx.Exec(ctx, "delete from models where source = 'config' and id <> all($1)", ids); err != nil {
			return err
		}
		rids := make([]string, len(c.Routes))
		for i := range c.Routes {
			c.Routes[i].Source, rids[i] = store.SourceConfig, c.Routes[i].ID
		}
		if _, err := tx.Exec(ctx, "delete from routes where source = 'config' and id <> all($1)", rids); err != nil {
			return err
		}
		return putCatalog(ctx, tx, c, putRoute)
	})
}

// RestoreCatalog puts every provider, model and route back exactly as c has them.
func (s *Store) RestoreCatalog(c store.Catalog) error {
	return s.catalogTx("", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "delete from providers; delete from models; delete from routes"); err != nil {
			return err
		}
		return putCatalog(ctx, tx, c, func(ctx context.Context, tx pgx.Tx, r store.Route) error {
			return upsert(ctx, tx, "routes", "id", r.ID, r.Source, r)
		})
	})
}

// putCatalog writes c's providers, models and routes (each route with route).
func putCatalog(ctx context.Context, tx pgx.Tx, c store.Catalog, route func(context.Context, pgx.Tx, store.Route) error) error {
	for _, p := range c.Providers {
		if err := putProvider(ctx, tx, p); err != nil {
			return err
		}
	}
	for _, m := range c.Models {
		if err := putModel(ctx, tx, m); err != nil {
			return err
		}
	}
	for _, r := range c.Routes {
		if err := route(ctx, tx, r); err != nil {
			return err
		}
	}
	return nil
}

// catalogTx is tx for a change of the catalog (id: the record, "" many), announced with it.
func (s *Store) catalogTx(id string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.tx(func(ctx context.Context, tx pgx.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return s.notify(ctx, tx, store.TopicCatalog, id)
	})
}

func upsert(ctx context.Context, tx pgx.Tx, table, keyCol, key string, source store.Source, v any) error {
	_, err := tx.Exec(ctx, "insert into "+table+" ("+keyCol+", source, doc) values ($1, $2, $3) "+
		"on conflict ("+keyCol+") do update set source = excluded.source, doc = excluded.doc", key, string(source), encode(v))
	return err
}

func putProvider(ctx context.Context, tx pgx.Tx, p store.Provider) error {
	return upsert(ctx, tx, "providers", "name", p.Name, p.Source, p)
}

func putModel(ctx context.Context, tx pgx.Tx, m store.Model) error {
	return upsert(ctx, tx, "models", "id", m.ID, m.Source, m)
}

// putRoute writes r, keeping the creation time of the route stored under its id.
func putRoute(ctx context.Context, tx pgx.Tx, r store.Route) error {
	old, found, err := doc[store.Route](ctx, tx, "select doc from routes where id = $1 for update", r.ID)
	if err != nil {
		return err
	}
	if found && !old.CreatedAt.IsZero() {
		r.CreatedAt = old.CreatedAt
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now().UTC()
	}
	return upsert(ctx, tx, "routes", "id", r.ID, r.Source, r)
}

// PutProvider creates or replaces one provider.
func (s *Store) PutProvider(p store.Provider) error {
	return s.catalogTx(p.Name, func(ctx context.Context, tx pgx.Tx) error { return putProvider(ctx, tx, p) })
}

// PutModel creates or replaces one model.
func (s *Store) PutModel(m store.Model) error {
	return s.catalogTx(m.ID, func(ctx context.Context, tx pgx.Tx) error { return putModel(ctx, tx, m) })
}

// DeleteProvider removes a provider; ErrNotFound if absent.
func (s *Store) DeleteProvider(name string) error {
	return s.delete("provider", "providers", "name", name)
}

// DeleteModel removes a model; ErrNotFound if absent.
func (s *Store) DeleteModel(id string) error { return s.delete("model", "models", "id", id) }

func (s *Store) delete(what, table, keyCol, key string) error {
	return s.catalogTx(key, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "delete from "+table+" where "+keyCol+" = $1", key)
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("%s %q: %w", what, key, store.ErrNotFound)
		}
		return err
	})
}

// Routes lists routes by id.
func (s *Store) Routes() ([]store.Route, error) {
	var out []store.Route
	err := s.read(func(ctx context.Context, q *pgxpool.Pool) (err error) {
		out, err = routes(ctx, q)
		return err
	})
	return out, err
}

// PutRoute creates or replaces a route; an existing route keeps its creation time.
func (s *Store) PutRoute(r store.Route) error {
	return s.catalogTx(r.ID, func(ctx context.Context, tx pgx.Tx) error { return putRoute(ctx, tx, r) })
}

// SetRouteStatus pauses or resumes a route (ErrNotFound if absent).
func (s *Store) SetRouteStatus(id, status string) (store.Route, error) {
	return s.changeRoute(id, func(r *store.Route) { r.Status = status })
}

// ChangeRouteRateLimits changes the rates c names of a route, under the route's row lock, so a
// concurrent change of another rate is kept.
func (s *Store) ChangeRouteRateLimits(id string, c store.RatesChange) (store.Route, error) {
	if err := c.Check(); err != nil {
		return store.Route{}, err
	}
	return s.changeRoute(id, func(r *store.Route) { r.RateLimits = c.Apply(r.RateLimits) })
}

// changeRoute changes the stored route id in one transaction, its row locked.
func (s *Store) changeRoute(id string, change func(*store.Route)) (store.Route, error) {
	var r store.Route
	err := s.catalogTx(id, func(ctx context.Context, tx pgx.Tx) error {
		var found bool
		var err error
		if r, found, err = doc[store.Route](ctx, tx, "select doc from routes where id = $1 for update", id); err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("route %q: %w", id, store.ErrNotFound)
		}
		change(&r)
		return upsert(ctx, tx, "routes", "id", r.ID, r.Source, r)
	})
	return r, err
}
