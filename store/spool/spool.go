// Package spool is a replica's durable local journal of the usage records (and holds) it
// settles, in front of a shared store (store/postgres): the Recorder of a gateway on
// store.driver postgres. A record is first committed to a bbolt file of the replica's own
// (store.spool) by bbolt's Settler, with the same group commit, so the request path never waits
// on the database and a kill -9 loses only what the single-node gateway loses (the records
// queued and not yet committed, about one settle window). A shipper then moves the journal to
// the database in batches (the target's SettleWith: one transaction, INSERT ... ON CONFLICT
// (request_id) DO NOTHING, only what was inserted debited), and deletes a batch from the
// journal only after its transaction committed. A crash between the two ships the batch again:
// the database keeps each request id once, so nothing is recorded twice, and balances there
// stay credits minus the sum of the records.
//
// While the database is unreachable the journal keeps taking records (the gateway's store
// health is the journal's, not the database's), and the shipper tries again with growing
// pauses, at once when the database's outage ends; nothing is dropped. A record the database
// refuses on its own (its account deleted, say) is moved to the journal's rejected bucket and
// reported, never retried for ever nor lost silently.
//
// Holds stay in the journal: they are this replica's, billed (as estimated records, shipped like
// the others) at its next start by SettleHolds, whatever other replicas are doing.
package spool

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"
	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// Buckets of the journal.
var (
	bucketRecords  = []byte("records")  // big-endian sequence -> record JSON: settled, not shipped
	bucketHolds    = []byte("holds")    // request id -> record JSON: this replica's open holds
	bucketRejected = []byte("rejected") // big-endian sequence -> rejection JSON: refused by the target
)

// Target is the store records are shipped to (*postgres.Store).
type Target interface {
	// SettleWith settles recs in one transaction: one error per record and the transaction's
	// own (wrapping store.ErrUnavailable when the store cannot commit).
	SettleWith(recs []store.UsageRecord, hc settle.HoldChanges) ([]error, error)
	// Outage is the target's current outage, nil while it takes writes.
	Outage() *store.Outage
	// Recovery is closed when the target's current outage ends (nil: none going on).
	Recovery() <-chan struct{}
}

// Options configure a Spool.
type Options struct {
	// Path is the journal's file; its directory is made if missing.
	Path string
	// Window is the local group commit's (settle.Window by default).
	Window time.Duration
	// Hooks report records that could not be stored (refused by the target, or invalid) and a
	// journal that cannot commit.
	Hooks store.SettlerHooks
	// MaxBatch bounds a shipment (default 2048 records).
	MaxBatch int
	// ShipEvery is the least time between the starts of two shipments (default ShipEvery); a
	// full batch ships at once.
	ShipEvery time.Duration
	Log       *slog.Logger

	// afterShip, in tests, runs after a shipment committed in the target and before the
	// journal lets go of it.
	afterShip func()
}

// Spool is the journal, its writer and its shipper: a store.Recorder.
type Spool struct {
	opts   Options
	db     *bolt.DB
	target Target
	health store.OutageState
	set    *settle.Settler

	kick chan struct{} // something new to ship
	quit chan struct{}
	done chan struct{}
	stop sync.Once

	shipMu   sync.Mutex // one shipment at a time
	pending  atomic.Int64
	holds    atomic.Int64
	rejected atomic.Int64
	shipped  atomic.Int64
	batches  atomic.Int64
}

var _ store.Recorder = (*Spool)(nil)

// Open opens (or creates) the journal at o.Path and starts its writer and shipper. Records a
// previous run left are shipped first thing.
func Open(o Options, target Target) (*Spool, error) {
	if o.Window <= 0 {
		o.Window = settle.Window
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 2048
	}
	if o.ShipEvery <= 0 {
		o.ShipEvery = ShipEvery
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o700); err != nil {
		return nil, fmt.Errorf("store.spool %s: %w", o.Path, err)
	}
	db, err := bolt.Open(o.Path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("store.spool %s is open in another process: give each replica its own spool file (store.spool, or a distinct replica.name): %w", o.Path, store.ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("store.spool %s: %w", o.Path, err)
	}
	s := &Spool{opts: o, db: db, target: target, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if err := s.count(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store.spool %s: %w", o.Path, err)
	}
	s.set = settle.New(s, settle.Options{Window: o.Window, Hooks: o.Hooks})
	go s.shipLoop()
	s.wake()
	return s, nil
}

// count makes the buckets and counts what they hold.
func (s *Spool) count() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketRecords, bucketHolds, bucketRejected} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		s.pending.Store(int64(tx.Bucket(bucketRecords).Stats().KeyN))
		s.holds.Store(int64(tx.Bucket(bucketHolds).Stats().KeyN))
		s.rejected.Store(int64(tx.Bucket(bucketRejected).Stats().KeyN))
		return nil
	})
}

// Path is the journal's file.
func (s *Spool) Path() string { return s.opts.Path }

// Record queues rec to be spooled; it ends the hold of the same request id, if any.
func (s *Spool) Record(rec store.UsageRecord) { s.set.Record(rec) }

// Hold queues the hold of an admitted request, or its progress (store.Recorder).
func (s *Spool) Hold(rec store.UsageRecord, price func() decimal.Decimal) { s.set.Hold(rec, price) }

// End queues the end of the hold of a request released unbilled.
func (s *Spool) End(requestID string) { s.set.End(requestID) }

// Queued is the number of changes waiting to be committed to the journal.
func (s *Spool) Queued() int { return s.set.Queued() }

// Stats counts the records committed to the journal (or reported) and the journal's commits.
func (s *Spool) Stats() store.SettlerStats { return s.set.Stats() }

// Close commits everything queued to the journal, ships what it can within drain (a database
// that is down keeps the rest in the journal for the next start), then closes the journal.
func (s *Spool) Close() { s.CloseWithin(10 * time.Second) }

// CloseWithin is Close with the shipping bounded by drain.
func (s *Spool) CloseWithin(drain time.Duration) {
	s.set.Close()
	s.stop.Do(func() { close(s.quit) })
	<-s.done
	if err := s.Drain(drain); err != nil {
		s.opts.Log.Warn("usage records left in the spool at stop are shipped at the next start", "spool", s.opts.Path, "records", s.pending.Load(), "error", err)
	}
	_ = s.db.Close()
}

// seqKey is a journal key: the sequence big-endian, so keys sort in the order records came.
func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // a record always encodes
		panic(fmt.Sprintf("spool: encode %T: %v", v, err))
	}
	return b
}
