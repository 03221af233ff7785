package tasks

// Callbacks: a task's object is POSTed to the client's callback_url on each status change,
// from the durable outbox (store), at least once, signed with the account's secret, through
// the guard's client (guard.go: never to the gateway itself or its network).

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollway/tollway/store"
)

// Headers of a callback delivery.
const (
	SignatureHeader = "x-tollway-signature" // t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
	DeliveryHeader  = "x-tollway-delivery-id"
	EventHeader     = "x-tollway-event"
	eventName       = "task.status_changed"
)

// Sign is the signature header of body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header against body, as a receiver does: the HMAC matches and the
// timestamp is within tolerance of now (replays of old deliveries fail).
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("signature header must be t=<unix>,v1=<hex>")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("signature timestamp outside the tolerance")
	}
	if !hmac.Equal([]byte(sig), []byte(mac(secret, ts, body))) {
		return errors.New("signature does not match")
	}
	return nil
}

// Deliverer sends the outbox's callbacks. A host that is slow or dead delays only its own
// deliveries: each host has at most PerHost deliveries in flight, each delivery runs on its own
// (nothing waits for a batch to finish), and the outbox is read past the callbacks of busy hosts.
type Deliverer struct {
	Store   *store.Store
	Client  *http.Client
	Log     *slog.Logger
	Now     func() time.Time
	Workers int           // deliveries in flight in all (default 256)
	PerHost int           // deliveries in flight to one host (default 4)
	Base    time.Duration // first retry delay (default 1 s), doubling up to an hour
	// MaxAttempts ends the retries of one callback (default 12: about 1.5 hours of trying).
	MaxAttempts int

	mu       sync.Mutex
	inFlight map[string]string // callback id -> its host
	perHost  map[string]int
	passed   map[string]string // ids passed over in the last read (their host was busy) -> host
	wg       sync.WaitGroup
}

// maxScan bounds one read of the outbox: due callbacks of busy hosts are passed over by id,
// without decoding, so this many cost little.
const maxScan = 100_000

// Run delivers due callbacks until ctx ends, reading the outbox every `every`; it returns once
// the deliveries in flight have ended. A restart resumes from the outbox.
func (d *Deliverer) Run(ctx context.Context, every time.Duration) {
	defer d.wg.Wait()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		d.dispatch(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// dispatch starts a delivery for every due callback whose host has room, while there is room.
func (d *Deliverer) dispatch(ctx context.Context) {
	workers, perHost := cmpInt(d.Workers, 256), cmpInt(d.PerHost, 4)
	d.mu.Lock()
	if d.inFlight == nil {
		d.inFlight, d.perHost = map[string]string{}, map[string]int{}
	}
	passed := d.passed
	d.passed = map[string]string{}
	d.mu.Unlock()
	skip := func(id string) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ok := d.inFlight[id]; ok {
			return true
		}
		if h, ok := passed[id]; ok && d.perHost[h] >= perHost {
			d.passed[id] = h
			return true
		}
		return false
	}
	take := func(c store.Callback) bool {
		host := hostOf(c.URL)
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.inFlight) >= workers {
			return false
		}
		if d.perHost[host] >= perHost {
			d.passed[c.ID] = host
			return true
		}
		d.inFlight[c.ID] = host
		d.perHost[host]++
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer d.release(c.ID, host)
			d.deliver(ctx, c)
		}()
		return len(d.inFlight) < workers
	}
	if err := d.Store.ScanDueCallbacks(d.Now(), maxScan, skip, take); err != nil {
		d.Log.Error("callbacks: the outbox cannot be read", "error", err)
	}
}

func (d *Deliverer) release(id, host string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.inFlight, id)
	if d.perHost[host]--; d.perHost[host] <= 0 {
		delete(d.perHost, host)
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
	err := d.post(ctx, c)
	if err == nil {
		if err := d.Store.AckCallback(c); err != nil {
			d.Log.Error("callbacks: delivered but not removed from the outbox (it will be sent again)", "delivery", c.ID, "error", err)
		}
		return
	}
	if ctx.Err() != nil {
		return // stopping: the callback stays due as it was, and goes out after the restart
	}
	if c.Attempt+1 >= cmpInt(d.MaxAttempts, 12) {
		d.Log.Warn("CALLBACK NOT DELIVERED: giving up", "delivery", c.ID, "task", c.TaskID, "attempts", c.Attempt+1, "error", err)
		_ = d.Store.AckCallback(c)
		return
	}
	delay := min(cmpDur(d.Base, time.Second)<<min(c.Attempt, 20), time.Hour)
	delay += time.Duration(rand.Int64N(int64(delay)/5 + 1)) // jitter: receivers recovering are not stampeded
	if err := d.Store.RetryCallback(c, d.Now().Add(delay)); err != nil {
		d.Log.Error("callbacks: retry not recorded", "delivery", c.ID, "error", err)
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

func cmpInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func cmpDur(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}
