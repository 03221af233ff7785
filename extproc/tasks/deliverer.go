package tasks

// The deliverer sends the outbox's callbacks so that a slow or dead host delays only its own:
// callbacks are handed to one lane per host (host:port of the URL), each lane holds at most
// laneDepth of them and sends them PerHost at a time, and the outbox is read past the callbacks
// of hosts whose lane is full. Nothing waits for a batch: a lane with more callbacks in the
// outbox asks for it to be read again once it is half empty, so a fast host is not held to the
// reading interval.
//
// Replicas sharing the outbox each read it; a callback is sent only by the one that claims it
// (store.CallbackLeases) just before sending, for Lease: exactly one replica sends each, and
// if it dies before the callback is acknowledged, another sends it again once the lease ends,
// with the same delivery id (at least once, never concurrently).

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tollway/tollway/store"
)

// Deliverer sends the outbox's callbacks.
type Deliverer struct {
	Store   store.Callbacks
	Client  *http.Client
	Log     *slog.Logger
	Now     func() time.Time
	Workers int           // deliveries in flight in all (default 256)
	PerHost int           // deliveries in flight to one host (default 4)
	Base    time.Duration // first retry delay (default 1 s), doubling up to an hour
	// MaxAttempts ends the retries of one callback (default 12: about 1.5 hours of trying).
	MaxAttempts int
	// Owner is this replica's name ("" : "local"); Lease is how long its claim on a callback
	// lasts (default DefaultCallbackLease): longer than one delivery may take.
	Owner string
	Lease time.Duration

	mu      sync.Mutex
	lanes   map[string]*lane  // by host
	held    map[string]string // callback id -> host, for every callback in a lane
	passed  map[string]string // ids passed over in the last read (their lane was full) -> host
	running int               // deliveries in flight
	kick    chan struct{}     // a lane emptied: read the outbox again
	wg      sync.WaitGroup
}

// lane is one host's callbacks: waiting ones, its senders (running, of which busy are sending
// one), and whether the outbox holds more than it had room for.
type lane struct {
	queue         []store.Callback
	running, busy int
	more          bool
}

// DefaultCallbackLease is how long a replica's claim on a callback it sends lasts: three times
// the callback client's timeout, so a claim never ends while its delivery may still be going.
const DefaultCallbackLease = 30 * time.Second

const (
	// laneDepth bounds the callbacks one host holds in memory (waiting and in flight); its
	// others stay in the outbox, passed over by id. maxHeld bounds them for all hosts.
	laneDepth = 64
	maxHeld   = 16384
	// maxScan bounds one read of the outbox: passed-over callbacks are not decoded, so this
	// many cost little.
	maxScan = 100_000
)

// Run delivers due callbacks until ctx ends, reading the outbox every `every`, and sooner when
// a lane with more in the outbox is half empty or a sender frees one of Workers; it returns
// once the deliveries in flight have ended. A restart resumes from the outbox.
func (d *Deliverer) Run(ctx context.Context, every time.Duration) {
	d.mu.Lock()
	d.lanes, d.held, d.kick = map[string]*lane{}, map[string]string{}, make(chan struct{}, 1)
	d.mu.Unlock()
	defer d.wg.Wait()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		d.dispatch(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-d.kick:
		}
	}
}

// dispatch reads the due callbacks into their hosts' lanes while they have room.
func (d *Deliverer) dispatch(ctx context.Context) {
	d.mu.Lock()
	passed := d.passed
	d.passed = map[string]string{}
	d.mu.Unlock()
	full := func(host string) bool {
		l := d.lanes[host]
		return l != nil && len(l.queue)+l.running >= laneDepth
	}
	skip := func(id string) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ok := d.held[id]; ok {
			return true
		}
		if h, ok := passed[id]; ok && full(h) {
			d.passed[id] = h
			d.lanes[h].more = true
			return true
		}
		return false
	}
	take := func(c store.Callback) bool {
		host := hostOf(c.URL)
		d.mu.Lock()
		defer d.mu.Unlock()
		if full(host) {
			d.passed[c.ID] = host
			d.lanes[host].more = true
			return true
		}
		if len(d.held) >= maxHeld {
			return false
		}
		l := d.lanes[host]
		if l == nil {
			l = &lane{}
			d.lanes[host] = l
		}
		l.queue = append(l.queue, c)
		d.held[c.ID] = host
		d.startLocked(ctx, host, l)
		return true
	}
	if err := d.Store.ScanDueCallbacks(d.Now(), maxScan, skip, take); err != nil {
		d.Log.Error("callbacks: the outbox cannot be read", "error", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for host, l := range d.lanes { // lanes that waited for room in Workers
		d.startLocked(ctx, host, l)
	}
}

// startLocked starts senders on host's lane for the callbacks no sender is about to take, up
// to PerHost, and Workers in all.
func (d *Deliverer) startLocked(ctx context.Context, host string, l *lane) {
	for l.running < cmpInt(d.PerHost, 4) && l.running-l.busy < len(l.queue) && d.running < cmpInt(d.Workers, 256) {
		l.running++
		d.running++
		d.wg.Add(1)
		go d.send(ctx, host, l)
	}
}

// send delivers the lane's callbacks one after another until it is empty (or the deliverer
// stops). A lane whose host has more in the outbox asks for a read when half empty, and a
// sender that frees the last of Workers asks too (another lane may be waiting for it).
func (d *Deliverer) send(ctx context.Context, host string, l *lane) {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		if len(l.queue) == 0 || ctx.Err() != nil {
			wasFull := d.running >= cmpInt(d.Workers, 256)
			l.running--
			d.running--
			if l.running == 0 {
				for _, c := range l.queue { // stopping: they stay in the outbox as they were
					delete(d.held, c.ID)
				}
				delete(d.lanes, host)
			}
			d.mu.Unlock()
			if wasFull {
				d.read()
			}
			return
		}
		c := l.queue[0]
		l.queue = l.queue[1:]
		l.busy++
		refill := l.more && len(l.queue) <= laneDepth/2
		if refill {
			l.more = false
		}
		d.mu.Unlock()
		if refill {
			d.read()
		}
		d.deliver(ctx, c)
		d.mu.Lock()
		l.busy--
		delete(d.held, c.ID)
		d.mu.Unlock()
	}
}

// read asks Run to read the outbox now (at most one request waits).
func (d *Deliverer) read() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// hostOf is the host (and port) a callback URL connects to, the unit of fairness.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

func (d *Deliverer) deliver(ctx context.Context, c store.Callback) {
	if c.Attempt >= cmpInt(d.MaxAttempts, 12) { // given up before; its removal failed then
		d.giveUp(c)
		return
	}
	won, err := d.Store.ClaimCallback(c, cmp.Or(d.Owner, "local"), cmp.Or(d.Lease, DefaultCallbackLease))
	if err != nil || !won { // another replica sends it; a failed claim is read again
		if err != nil {
			d.Log.Warn("callbacks: a callback could not be claimed; it is tried again at the next read", "delivery", c.ID, "error", err)
		}
		return
	}
	err = d.post(ctx, c)
	if err == nil {
		if err := d.Store.AckCallback(c); err != nil {
			d.Log.Error("callbacks: delivered but not removed from the outbox (it will be sent again)", "delivery", c.ID, "error", err)
		}
		return
	}
	if ctx.Err() != nil {
		return // stopping: the callback is due again once its claim ends, here or elsewhere
	}
	if c.Attempt+1 >= cmpInt(d.MaxAttempts, 12) {
		d.Log.Warn("CALLBACK NOT DELIVERED: giving up", "delivery", c.ID, "task", c.TaskID, "attempts", c.Attempt+1, "error", err)
		d.giveUp(c)
		return
	}
	delay := min(cmpDur(d.Base, time.Second)<<min(c.Attempt, 20), time.Hour)
	delay += time.Duration(rand.Int64N(int64(delay)/5 + 1)) // jitter: receivers recovering are not stampeded
	if err := d.Store.RetryCallback(c, d.Now().Add(delay)); err != nil {
		d.Log.Error("callbacks: retry not recorded", "delivery", c.ID, "error", err)
	}
}

// giveUp removes a callback given up from the outbox. A removal that fails is logged and the
// give-up kept as an attempt past the last (RetryCallback), so that the next read removes it
// without sending it again; if that fails too, the callback is sent once more first.
func (d *Deliverer) giveUp(c store.Callback) {
	err := d.Store.AckCallback(c)
	if err == nil {
		return
	}
	d.Log.Error("callbacks: a callback given up could not be removed from the outbox; its removal is tried again", "delivery", c.ID, "error", err)
	if err := d.Store.RetryCallback(c, d.Now()); err != nil {
		d.Log.Error("callbacks: the give-up could not be recorded either; the callback is sent once more before it is given up again", "delivery", c.ID, "error", err)
	}
}

func (d *Deliverer) post(ctx context.Context, c store.Callback) error {
	secret, err := d.Store.CallbackSecret(c.Account)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(c.Body))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set(SignatureHeader, Sign(secret, d.Now(), c.Body))
	req.Header.Set(DeliveryHeader, c.ID)
	req.Header.Set(EventHeader, eventName)
	resp, err := d.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}
