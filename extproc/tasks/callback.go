package tasks

// Callbacks: a task's object is POSTed to the client's callback_url on each status change,
// from the durable outbox (store), at least once, signed with the account's secret. A client
// URL must not reach the gateway's own network: it is checked at creation and again at every
// connection (DNS may answer differently the second time).

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
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// metadata are cloud metadata addresses, refused whatever the allow-list says about their
// ranges unless listed themselves.
var metadata = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// forbidden says why a callback may not connect to a, or "" when it may: loopback, private,
// link-local, unspecified, multicast, CGNAT and metadata addresses are the gateway's own
// network, unless allow lists them.
func forbidden(a netip.Addr, allow []netip.Prefix) string {
	a = a.Unmap()
	for _, p := range allow {
		if p.Contains(a) {
			return ""
		}
	}
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsPrivate(), cgnat.Contains(a):
		return "a private address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		for _, m := range metadata {
			if a == m {
				return "a cloud metadata address"
			}
		}
		return "a link-local address"
	case a.IsUnspecified(), a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "not a unicast address"
	}
	for _, m := range metadata {
		if a == m {
			return "a cloud metadata address"
		}
	}
	return ""
}

// Resolver looks up a host's addresses (net.DefaultResolver; tests stand in).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckCallbackURL refuses a callback URL that is not http(s) or whose host resolves to an
// address of the gateway's own network (see forbidden), naming the fix.
func CheckCallbackURL(ctx context.Context, raw string, allow []netip.Prefix, r Resolver) error {
	if len(raw) > 2048 {
		return fmt.Errorf("callback_url is over 2048 bytes")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return fmt.Errorf("callback_url %q must be an http or https URL with a host (and no credentials)", clip(raw))
	}
	host := u.Hostname()
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else {
		if r == nil {
			r = net.DefaultResolver
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if addrs, err = r.LookupNetIP(ctx, "ip", host); err != nil || len(addrs) == 0 {
			return fmt.Errorf("callback_url host %q does not resolve: %v", clip(host), err)
		}
	}
	for _, a := range addrs {
		if why := forbidden(a, allow); why != "" {
			return fmt.Errorf("callback_url host %q is %s (%s): callbacks go to public addresses only; an operator can allow it with callbacks.allow_private", clip(host), why, a)
		}
	}
	return nil
}

// AllowList is callbacks.allow_private as configured now: a reload replaces it, and the next
// check (a creation, a delivery's connection) reads the new list.
type AllowList struct {
	p atomic.Pointer[[]netip.Prefix]
}

// NewAllowList makes a list holding p.
func NewAllowList(p []netip.Prefix) *AllowList {
	a := &AllowList{}
	a.Set(p)
	return a
}

// Set replaces the list.
func (a *AllowList) Set(p []netip.Prefix) { a.p.Store(&p) }

// Prefixes is the list now; a nil list allows nothing private.
func (a *AllowList) Prefixes() []netip.Prefix {
	if a == nil {
		return nil
	}
	if p := a.p.Load(); p != nil {
		return *p
	}
	return nil
}

// NewCallbackClient is the client deliveries use: every connection's address is checked again
// (DNS rebinding), redirects are not followed, and a delivery takes at most 10 s.
func NewCallbackClient(allow *AllowList) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("callback: address %q: %w", address, err)
		}
		if why := forbidden(ap.Addr(), allow.Prefixes()); why != "" {
			return fmt.Errorf("callback: refusing to connect to %s (%s)", ap.Addr(), why)
		}
		return nil
	}}
	return &http.Client{
		Timeout:       10 * time.Second,
		Transport:     &http.Transport{DialContext: d.DialContext, Proxy: nil, MaxIdleConnsPerHost: 4},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

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

// Deliverer sends the outbox's callbacks.
type Deliverer struct {
	Store   *store.Store
	Client  *http.Client
	Log     *slog.Logger
	Now     func() time.Time
	Workers int           // deliveries at once (default 16)
	Base    time.Duration // first retry delay (default 1 s), doubling up to an hour
	// MaxAttempts ends the retries of one callback (default 12: about 1.5 hours of trying).
	MaxAttempts int
}

// Run delivers due callbacks until ctx ends; a restart resumes from the outbox.
func (d *Deliverer) Run(ctx context.Context, every time.Duration) {
	workers := cmpInt(d.Workers, 16)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		due, err := d.Store.DueCallbacks(d.Now(), workers*4)
		if err != nil {
			d.Log.Error("callbacks: the outbox cannot be read", "error", err)
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, workers)
		for _, c := range due {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				d.deliver(ctx, c)
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (d *Deliverer) deliver(ctx context.Context, c store.Callback) {
	err := d.post(ctx, c)
	if err == nil {
		if err := d.Store.AckCallback(c); err != nil {
			d.Log.Error("callbacks: delivered but not removed from the outbox (it will be sent again)", "delivery", c.ID, "error", err)
		}
		return
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
