// Package bbolt is the store.Store that keeps Tollway's durable state in one bbolt file: the
// providers, models and routes that configuration and the admin API write, API keys (hashed,
// never in clear), the ledger (accounts with credit balances and the usage records that debit
// them, ledger.go), media tasks and their callbacks, and x402's pending settlements and used
// credentials. Its Settler is the store.Recorder that writes usage records with group commit.
//
// bbolt takes an exclusive file lock, so one process owns the file; the CLI talks to the running
// gateway's admin API instead of opening it. Several gateways sharing state need a shared
// implementation (store/postgres).
package bbolt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
)

var (
	bucketProviders = []byte("providers")
	bucketModels    = []byte("models")
	bucketKeys      = []byte("keys")
)

// allBuckets is every bucket Open creates.
var allBuckets = [][]byte{
	bucketProviders, bucketModels, bucketKeys, bucketRoutes,
	bucketAccounts, bucketUsage, bucketUsageByRequest, bucketUsageAgg, bucketSpendMonth, bucketUsageRoute,
}

// bucketFill builds a bucket that indexes older ones when a file written before it existed is
// opened (in the transaction that creates it).
var bucketFill = map[string]func(tx *bolt.Tx) error{}

// Store is a bbolt-backed record store.
type Store struct {
	db     *bolt.DB
	health health
	hub    store.Hub // the catalog, key and account changes committed (Subscribe)
	reps   replicas  // this process, the only one a bbolt file has (replicas.go)
	leases leases    // who polls each running task and sends each callback (leases.go)
}

var _ store.Store = (*Store)(nil)

// Subscribe tells of the catalog, key and account changes committed from now on
// (store.Changes); one process owns a bbolt file, so they are all this store's own.
func (s *Store) Subscribe(ctx context.Context) <-chan store.Change { return s.hub.Subscribe(ctx) }

// changed publishes a committed change of topic (id "": many records).
func (s *Store) changed(t store.Topic, id string) {
	s.hub.Publish(store.Change{Topic: t, ID: id, Local: true})
}

// Open opens (creating if needed) the bbolt file at path. A lock held by another process fails
// after a short timeout instead of hanging.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: create directory for %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("store %s: %w (is another tollway running with this store.path?)", path, store.ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			fresh := tx.Bucket(b) == nil
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
			if fill := bucketFill[string(b)]; fresh && fill != nil {
				if err := fill(tx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: init %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close stops the watcher (Watch) and releases the file lock.
func (s *Store) Close() error {
	s.stopWatching()
	return s.db.Close()
}

// ReplaceConfig makes the config-owned records equal to c in one transaction: records the file
// no longer names are deleted, admin-owned records are left alone unless the file names them.
func (s *Store) ReplaceConfig(c store.Catalog) error {
	return s.catalogUpdate("", func(tx *bolt.Tx) error {
		if err := replaceSource(tx.Bucket(bucketProviders), providerRecords(c.Providers)); err != nil {
			return err
		}
		if err := replaceSource(tx.Bucket(bucketModels), modelRecords(c.Models)); err != nil {
			return err
		}
		rb := tx.Bucket(bucketRoutes)
		return replaceSource(rb, routeRecords(rb, c.Routes))
	})
}

type sourced struct {
	key string
	val any
}

func providerRecords(ps []store.Provider) []sourced {
	out := make([]sourced, len(ps))
	for i := range ps {
		ps[i].Source = store.SourceConfig
		out[i] = sourced{ps[i].Name, ps[i]}
	}
	return out
}

func modelRecords(ms []store.Model) []sourced {
	out := make([]sourced, len(ms))
	for i := range ms {
		ms[i].Source = store.SourceConfig
		out[i] = sourced{ms[i].ID, ms[i]}
	}
	return out
}

func replaceSource(b *bolt.Bucket, recs []sourced) error {
	keep := make(map[string]bool, len(recs))
	for _, r := range recs {
		keep[r.key] = true
	}
	var stale [][]byte
	err := b.ForEach(func(k, v []byte) error {
		var head struct {
			Source store.Source `json:"source"`
		}
		if err := json.Unmarshal(v, &head); err != nil {
			return fmt.Errorf("store: decode %s: %w", k, err)
		}
		if head.Source == store.SourceConfig && !keep[string(k)] {
			stale = append(stale, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range stale {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	for _, r := range recs {
		if err := putJSON(b, r.key, r.val); err != nil {
			return err
		}
	}
	return nil
}

// PutProvider upserts one provider (admin API).
func (s *Store) PutProvider(p store.Provider) error {
	return s.catalogUpdate(p.Name, func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketProviders), p.Name, p) })
}

// PutModel upserts one model (admin API).
func (s *Store) PutModel(m store.Model) error {
	return s.catalogUpdate(m.ID, func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketModels), m.ID, m) })
}

// DeleteProvider removes a provider; ErrNotFound if absent.
func (s *Store) DeleteProvider(name string) error { return s.delete(bucketProviders, name) }

// DeleteModel removes a model; ErrNotFound if absent.
func (s *Store) DeleteModel(id string) error { return s.delete(bucketModels, id) }

func (s *Store) delete(bucket []byte, key string) error {
	return s.catalogUpdate(key, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b.Get([]byte(key)) == nil {
			return fmt.Errorf("%s %q: %w", bucket[:len(bucket)-1], key, store.ErrNotFound)
		}
		return b.Delete([]byte(key))
	})
}

// Catalog reads all providers and models, sorted by name and id.
func (s *Store) Catalog() (store.Catalog, error) {
	var c store.Catalog
	err := s.db.View(func(tx *bolt.Tx) error {
		if err := eachJSON(tx.Bucket(bucketProviders), func(p store.Provider) { c.Providers = append(c.Providers, p) }); err != nil {
			return err
		}
		if err := eachJSON(tx.Bucket(bucketModels), func(m store.Model) { c.Models = append(c.Models, m) }); err != nil {
			return err
		}
		return eachJSON(tx.Bucket(bucketRoutes), func(r store.Route) { c.Routes = append(c.Routes, r) })
	})
	sort.Slice(c.Routes, func(i, j int) bool { return c.Routes[i].ID < c.Routes[j].ID })
	sort.Slice(c.Providers, func(i, j int) bool { return c.Providers[i].Name < c.Providers[j].Name })
	sort.Slice(c.Models, func(i, j int) bool { return c.Models[i].ID < c.Models[j].ID })
	return c, err
}

// PutKey stores a new or updated key record.
func (s *Store) PutKey(k store.Key) error {
	err := s.update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketKeys), k.ID, k) })
	if err == nil {
		s.changed(store.TopicKeys, k.ID)
	}
	return err
}

// catalogUpdate is update for a change of the catalog (id: the record, "" many), told of once
// it committed.
func (s *Store) catalogUpdate(id string, fn func(tx *bolt.Tx) error) error {
	err := s.update(fn)
	if err == nil {
		s.changed(store.TopicCatalog, id)
	}
	return err
}

// GetKey returns one key record.
func (s *Store) GetKey(id string) (store.Key, error) {
	var k store.Key
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKeys).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("key %q: %w", id, store.ErrNotFound)
		}
		return jsonUnmarshal(v, &k)
	})
	return k, err
}

// Keys lists all key records, oldest first.
func (s *Store) Keys() ([]store.Key, error) {
	var ks []store.Key
	err := s.db.View(func(tx *bolt.Tx) error {
		return eachJSON(tx.Bucket(bucketKeys), func(k store.Key) { ks = append(ks, k) })
	})
	sort.Slice(ks, func(i, j int) bool { return ks[i].CreatedAt.Before(ks[j].CreatedAt) })
	return ks, err
}

func putJSON(b *bolt.Bucket, key string, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s: %w", key, err)
	}
	return b.Put([]byte(key), buf)
}

func eachJSON[T any](b *bolt.Bucket, fn func(T)) error {
	return b.ForEach(func(k, v []byte) error {
		var t T
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("store: decode %s: %w", k, err)
		}
		fn(t)
		return nil
	})
}

func jsonUnmarshal(v []byte, out any) error {
	if err := json.Unmarshal(v, out); err != nil {
		return fmt.Errorf("store: decode: %w", err)
	}
	return nil
}

// RestoreCatalog puts providers and models back exactly as c has them (undoing a rejected change).
func (s *Store) RestoreCatalog(c store.Catalog) error {
	return s.catalogUpdate("", func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketProviders, bucketModels, bucketRoutes} {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		for _, p := range c.Providers {
			if err := putJSON(tx.Bucket(bucketProviders), p.Name, p); err != nil {
				return err
			}
		}
		for _, m := range c.Models {
			if err := putJSON(tx.Bucket(bucketModels), m.ID, m); err != nil {
				return err
			}
		}
		for _, r := range c.Routes {
			if err := putJSON(tx.Bucket(bucketRoutes), r.ID, r); err != nil {
				return err
			}
		}
		return nil
	})
}
