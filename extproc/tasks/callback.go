package tasks

// Callbacks: a task's object is POSTed to the client's callback_url on each status change,
// from the durable outbox (store) by the deliverer (deliverer.go), at least once, signed with
// the account's secret (here), through the guard's client (guard.go: never to the gateway
// itself or its network).

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
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
