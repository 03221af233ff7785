// Package store owns Tollway's durable state in one bbolt file: the providers and models that
// configuration and the admin API write, API keys (hashed, never in clear), and the ledger:
// accounts with credit balances and the usage records that debit them (ledger.go).
//
// bbolt takes an exclusive file lock, so one process owns the file; the CLI talks to the running
// gateway's admin API instead of opening it.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"
)

// Sentinel errors; callers map them to HTTP status at their boundary.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	ErrInvalid  = errors.New("invalid")
	ErrLocked   = errors.New("store is locked by another process")
)

// kindError carries a complete message and matches one sentinel with errors.Is, so that messages
// meant for operators do not end in ": not found".
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func errorOf(kind error, format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kind: kind}
}

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

// Source says who wrote a record: the config file owns its records and replaces them on reload;
// records written through the admin API survive reloads.
type Source string

const (
	SourceConfig Source = "config"
	SourceAdmin  Source = "admin"
)

// Provider is an upstream a model can be served by.
type Provider struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	BaseURL string `json:"base_url"`
	// APIKeyRef is the credential as written in config ("${OPENAI_API_KEY}"); the resolved secret
	// is never written to disk.
	APIKeyRef string `json:"api_key_ref,omitempty"`
	// AccessKeyRef and SecretKeyRef are Kling's key pair as written in config (references
	// only, like APIKeyRef).
	AccessKeyRef string `json:"access_key_ref,omitempty"`
	SecretKeyRef string `json:"secret_key_ref,omitempty"`
	CAFile       string `json:"ca_file,omitempty"`
	Source       Source `json:"source"`
}

// ModelProvider maps a catalog model to one provider's model name.
type ModelProvider struct {
	Provider string `json:"provider" mapstructure:"provider"`
	Model    string `json:"model" mapstructure:"model"`
	// SupportedSamplingParameters, when set, replaces the model's list for this provider:
	// parameters this provider does not accept for the model are removed.
	SupportedSamplingParameters []string `json:"supported_sampling_parameters,omitempty" mapstructure:"supported_sampling_parameters"`
}

// Model is a catalog entry.
type Model struct {
	ID                          string          `json:"id"`
	Name                        string          `json:"name,omitempty"`
	Providers                   []ModelProvider `json:"providers"`
	SupportedSamplingParameters []string        `json:"supported_sampling_parameters,omitempty"`
	InputModalities             []string        `json:"input_modalities,omitempty"`
	OutputModalities            []string        `json:"output_modalities,omitempty"`
	ContextLength               int64           `json:"context_length,omitempty"`
	MaxOutputLength             int64           `json:"max_output_length,omitempty"`
	SupportedFeatures           []string        `json:"supported_features,omitempty"`
	// Family and Variant make a media model (spec 4.3: V1, ...); empty for chat models.
	Family  string `json:"family,omitempty"`
	Variant string `json:"variant,omitempty"`
	// Pricing is kept as the JSON it was validated as (decimal strings), object or tier array.
	Pricing json.RawMessage `json:"pricing,omitempty"`
	Source  Source          `json:"source"`
}

// Key is an API key record. Only the SHA-256 of the secret is stored.
type Key struct {
	ID        string     `json:"id"`
	Hash      string     `json:"hash"`
	Prefix    string     `json:"prefix"` // first characters of the secret, to recognise a key in lists
	Account   string     `json:"account"`
	Name      string     `json:"name,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// MonthlyLimit caps the key's spend per UTC calendar month; nil means no limit.
	MonthlyLimit *decimal.Decimal `json:"monthly_limit,omitempty"`
	// Models the key may use (catalog model ids or route names); nil or empty means all.
	Models []string `json:"models,omitempty"`
	// LastUsedAt is when the key last authenticated a request, to the second, as the gateway
	// last saved it (at most once a minute: SetKeysUsed); nil: never.
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// Store is a bbolt-backed record store.
type Store struct {
	db     *bolt.DB
	health health
}

// Open opens (creating if needed) the bbolt file at path. A lock held by another process fails
// after a short timeout instead of hanging.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: create directory for %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("store %s: %w (is another tollway running with this store.path?)", path, ErrLocked)
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

// Catalog is the set of providers and models, read in one transaction.
type Catalog struct {
	Providers []Provider
	Models    []Model
	Routes    []Route
}

// ReplaceConfig makes the config-owned records equal to c in one transaction: records the file
// no longer names are deleted, admin-owned records are left alone unless the file names them.
func (s *Store) ReplaceConfig(c Catalog) error {
	return s.update(func(tx *bolt.Tx) error {
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

func providerRecords(ps []Provider) []sourced {
	out := make([]sourced, len(ps))
	for i := range ps {
		ps[i].Source = SourceConfig
		out[i] = sourced{ps[i].Name, ps[i]}
	}
	return out
}

func modelRecords(ms []Model) []sourced {
	out := make([]sourced, len(ms))
	for i := range ms {
		ms[i].Source = SourceConfig
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
			Source Source `json:"source"`
		}
		if err := json.Unmarshal(v, &head); err != nil {
			return fmt.Errorf("store: decode %s: %w", k, err)
		}
		if head.Source == SourceConfig && !keep[string(k)] {
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
func (s *Store) PutProvider(p Provider) error {
	return s.update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketProviders), p.Name, p) })
}

// PutModel upserts one model (admin API).
func (s *Store) PutModel(m Model) error {
	return s.update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketModels), m.ID, m) })
}

// DeleteProvider removes a provider; ErrNotFound if absent.
func (s *Store) DeleteProvider(name string) error { return s.delete(bucketProviders, name) }

// DeleteModel removes a model; ErrNotFound if absent.
func (s *Store) DeleteModel(id string) error { return s.delete(bucketModels, id) }

func (s *Store) delete(bucket []byte, key string) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b.Get([]byte(key)) == nil {
			return fmt.Errorf("%s %q: %w", bucket[:len(bucket)-1], key, ErrNotFound)
		}
		return b.Delete([]byte(key))
	})
}

// Catalog reads all providers and models, sorted by name and id.
func (s *Store) Catalog() (Catalog, error) {
	var c Catalog
	err := s.db.View(func(tx *bolt.Tx) error {
		if err := eachJSON(tx.Bucket(bucketProviders), func(p Provider) { c.Providers = append(c.Providers, p) }); err != nil {
			return err
		}
		if err := eachJSON(tx.Bucket(bucketModels), func(m Model) { c.Models = append(c.Models, m) }); err != nil {
			return err
		}
		return eachJSON(tx.Bucket(bucketRoutes), func(r Route) { c.Routes = append(c.Routes, r) })
	})
	sort.Slice(c.Routes, func(i, j int) bool { return c.Routes[i].ID < c.Routes[j].ID })
	sort.Slice(c.Providers, func(i, j int) bool { return c.Providers[i].Name < c.Providers[j].Name })
	sort.Slice(c.Models, func(i, j int) bool { return c.Models[i].ID < c.Models[j].ID })
	return c, err
}

// PutKey stores a new or updated key record.
func (s *Store) PutKey(k Key) error {
	return s.update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketKeys), k.ID, k) })
}

// GetKey returns one key record.
func (s *Store) GetKey(id string) (Key, error) {
	var k Key
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKeys).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("key %q: %w", id, ErrNotFound)
		}
		return jsonUnmarshal(v, &k)
	})
	return k, err
}

// Keys lists all key records, oldest first.
func (s *Store) Keys() ([]Key, error) {
	var ks []Key
	err := s.db.View(func(tx *bolt.Tx) error {
		return eachJSON(tx.Bucket(bucketKeys), func(k Key) { ks = append(ks, k) })
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
func (s *Store) RestoreCatalog(c Catalog) error {
	return s.update(func(tx *bolt.Tx) error {
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
