package spool

// The shipper: the journal's records go to the target in batches, oldest first, each batch in
// one of the target's transactions, and leave the journal only once that committed.

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tollway/tollway/store"
	"github.com/tollway/tollway/store/settle"
)

// shipPauses are the waits between tries while the target cannot commit (the last repeating);
// its outage ending cuts a wait short.
var shipPauses = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}

// ShipEvery is the default least time between the starts of two shipments: a record spooled while the
// shipper is idle ships at once, and under load records gather for up to this long, so one
// database transaction carries many. Shipping later adds only lag: a record is durable in the
// journal before it is shipped, so a kill -9 loses no more.
const ShipEvery = 100 * time.Millisecond

// spooled is a record in the journal, by its key.
type spooled struct {
	key []byte
	rec store.UsageRecord
}

// rejection is what the rejected bucket keeps: the record and why the target refused it.
type rejection struct {
	Record store.UsageRecord `json:"record"`
	Error  string            `json:"error"`
	At     time.Time         `json:"at"`
}

func (s *Spool) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// shipLoop ships whenever records were spooled, until Close.
func (s *Spool) shipLoop() {
	defer close(s.done)
	fails := 0
	var last time.Time // the last shipment's start
	for {
		var pause <-chan time.Time
		var recovered <-chan struct{}
		if fails > 0 {
			t := time.NewTimer(shipPauses[min(fails-1, len(shipPauses)-1)])
			pause, recovered = t.C, s.target.Recovery()
			select {
			case <-s.quit:
				t.Stop()
				return
			case <-pause:
			case <-recovered:
			}
			t.Stop()
		} else {
			select {
			case <-s.quit:
				return
			case <-s.kick:
			}
			s.gather(last)
		}
		last = time.Now()
		if err := s.ship(fails > 0); err != nil {
			if fails == 0 {
				s.opts.Log.Warn("the database cannot take usage records now: they stay in the spool and are shipped when it can", "spool", s.opts.Path, "records", s.pending.Load(), "error", err)
			}
			fails++
			continue
		}
		if fails > 0 {
			s.opts.Log.Info("the spool ships to the database again", "spool", s.opts.Path)
		}
		fails = 0
	}
}

// gather waits until ShipEvery has passed since the last shipment started, a batch is full, or
// Close: records spooled meanwhile go in the same shipment.
func (s *Spool) gather(last time.Time) {
	wait := s.opts.ShipEvery - time.Since(last)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for s.pending.Load() < int64(s.opts.MaxBatch) {
		select {
		case <-t.C:
			return
		case <-s.quit:
			return
		case <-s.kick:
		}
	}
}

// shipAll ships batches until the journal is empty or the target cannot commit.
func (s *Spool) shipAll() error { return s.ship(true) }

// ship ships batches until one is short of MaxBatch (all: until the journal is empty) or the
// target cannot commit. The loop stops at a short batch so that records spooled during a
// shipment gather for the next one rather than go alone.
func (s *Spool) ship(all bool) error {
	for {
		n, err := s.shipOnce()
		if err != nil || n == 0 || (!all && n < s.opts.MaxBatch) {
			return err
		}
	}
}

// Drain ships everything in the journal within d; the error says why records are left.
func (s *Spool) Drain(d time.Duration) error {
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		err := s.shipAll()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d usage records not shipped within %v: %w", s.pending.Load(), d, err)
		}
		time.Sleep(shipPauses[min(i, len(shipPauses)-1)])
	}
}

// shipOnce ships the oldest batch: how many records left the journal, and the target's error
// when it could not commit (the batch stays).
func (s *Spool) shipOnce() (int, error) {
	s.shipMu.Lock()
	defer s.shipMu.Unlock()
	batch, err := s.oldest(s.opts.MaxBatch)
	if err != nil || len(batch) == 0 {
		return 0, err
	}
	recs := make([]store.UsageRecord, len(batch))
	for i := range batch {
		recs[i] = batch[i].rec
	}
	errs, err := s.target.SettleWith(recs, settle.HoldChanges{})
	if err != nil && !errors.Is(err, store.ErrUnavailable) && len(batch) > 1 {
		// Something in the batch the database refuses: each record on its own finds which.
		errs, err = s.oneByOne(recs)
	}
	if err != nil {
		return 0, err
	}
	s.batches.Add(1)
	if s.opts.afterShip != nil {
		s.opts.afterShip()
	}
	return len(batch), s.forget(batch, errs)
}

// oneByOne settles each record in its own transaction: the errors of those that failed on
// their own, or the target's when it cannot commit at all (nothing is forgotten then).
func (s *Spool) oneByOne(recs []store.UsageRecord) ([]error, error) {
	errs := make([]error, len(recs))
	for i := range recs {
		e, err := s.target.SettleWith(recs[i:i+1], settle.HoldChanges{})
		switch {
		case errors.Is(err, store.ErrUnavailable):
			return nil, err
		case err != nil:
			errs[i] = err
		default:
			errs[i] = e[0]
		}
	}
	return errs, nil
}

// oldest reads up to n records from the head of the journal.
func (s *Spool) oldest(n int) ([]spooled, error) {
	var out []spooled
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRecords).Cursor()
		for k, v := c.First(); k != nil && len(out) < n; k, v = c.Next() {
			var rec store.UsageRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				rec = store.UsageRecord{RequestID: fmt.Sprintf("undecodable spool entry %x", k)}
			}
			out = append(out, spooled{key: append([]byte(nil), k...), rec: rec})
		}
		return nil
	})
	return out, err
}

// forget removes a committed batch from the journal; records the target refused on their own
// move to the rejected bucket and are reported.
func (s *Spool) forget(batch []spooled, errs []error) error {
	var refused []int
	for i, e := range errs {
		if e != nil {
			refused = append(refused, i)
		}
	}
	now := time.Now().UTC()
	err := s.update(func(tx *bolt.Tx) error {
		rb, xb := tx.Bucket(bucketRecords), tx.Bucket(bucketRejected)
		for _, b := range batch {
			if err := rb.Delete(b.key); err != nil {
				return err
			}
		}
		for _, i := range refused {
			if err := xb.Put(batch[i].key, encode(rejection{Record: batch[i].rec, Error: errs[i].Error(), At: now})); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		// Shipped but still in the journal: the next shipment sends them again, and the
		// target keeps each request id once.
		return err
	}
	s.shipped.Add(int64(len(batch) - len(refused)))
	s.rejected.Add(int64(len(refused)))
	s.pending.Add(-int64(len(batch))) // last: a reader seeing none pending sees them counted
	for _, i := range refused {
		if s.opts.Hooks.NotStored != nil {
			s.opts.Hooks.NotStored(batch[i].rec, fmt.Errorf("the database refused it (kept in the spool's rejected records): %w", errs[i]))
		}
	}
	return nil
}
