package extproc

// Providers that refused the gateway's credential (HTTP 401, or a family's own refusal: Gemini's
// API_KEY_INVALID, MiniMax's status_code 1004 inside an HTTP 200): such a provider cannot serve
// anyone until its configuration changes or it answers again, so the catalog's is_ready, route
// health and the admin status count it as down, and the operator is told loudly, once a minute,
// rather than every client being told to change a valid key.
//
// It is tried again on a bounded schedule, so a key fixed at the provider (re-enabled, topped
// up) clears without a restart: chat keeps it in Envoy's chain, so the next chat request tries
// it; a media create, which the gateway sends itself, tries it again once refusalRetry has
// passed since its last refusal (or its last retry); a running task's status query tries it at
// every poll. Any answer that accepts the credential clears the refusal, and so does a config
// reload (the operator's word that the credential changed).

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollway/tollway/xds/ir"
)

const (
	// refusalReminder is how often a provider that keeps refusing is logged again.
	refusalReminder = time.Minute
	// refusalRetry is how long a media create waits after a provider's last refusal (or the
	// last retry) before it tries that provider again: one client request in that while pays a
	// refused round trip, not every one.
	refusalRetry = 15 * time.Second
)

// refusals is the set of providers whose last answer refused the gateway's credential.
type refusals struct {
	mu     sync.Mutex
	byName map[string]*refusal
	// acceptedAt is when each provider last accepted the credential: a refusal that happened
	// before it is stale news (Envoy's refusal log arrives a flush interval late) and is ignored.
	acceptedAt map[string]time.Time
}

type refusal struct {
	since, last, logged, retried time.Time
	count                        int
}

// ProviderRefusal is a provider refusing the gateway's credential, as the admin API shows it.
type ProviderRefusal struct {
	Since time.Time `json:"since"` // the first refusal since it last accepted the credential
	Last  time.Time `json:"last"`
	Count int       `json:"count"`
	// NextRetry is when a media create may try the provider again (chat tries it with every
	// request); a config reload retries it at once.
	NextRetry time.Time `json:"next_retry"`
}

func (r *refusal) view() ProviderRefusal {
	return ProviderRefusal{Since: r.since.UTC(), Last: r.last.UTC(), Count: r.count, NextRetry: r.nextRetry().UTC()}
}

func (r *refusal) nextRetry() time.Time {
	if r.retried.After(r.last) {
		return r.retried.Add(refusalRetry)
	}
	return r.last.Add(refusalRetry)
}

// refused records a refusal from provider that happened at now; it reports whether to log (the
// first refusal, or the first after refusalReminder). A refusal older than the provider's last
// acceptance changes nothing.
func (r *refusals) refused(provider string, now time.Time) (log bool, rf refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.acceptedAt[provider]) {
		return false, refusal{}
	}
	if r.byName == nil {
		r.byName = map[string]*refusal{}
	}
	cur := r.byName[provider]
	if cur == nil {
		cur = &refusal{since: now}
		r.byName[provider] = cur
	}
	cur.count++
	cur.last = now
	if cur.logged.IsZero() || now.Sub(cur.logged) >= refusalReminder {
		cur.logged = now
		return true, *cur
	}
	return false, *cur
}

// accepted clears provider after an answer at now that accepted the credential; it reports
// whether it had been refusing.
func (r *refusals) accepted(provider string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.acceptedAt == nil {
		r.acceptedAt = map[string]time.Time{}
	}
	if now.After(r.acceptedAt[provider]) {
		r.acceptedAt[provider] = now
	}
	_, was := r.byName[provider]
	delete(r.byName, provider)
	return was
}

func (r *refusals) has(provider string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.byName[provider]
	return ok
}

// get is provider's refusal, if it is refusing.
func (r *refusals) get(provider string) (ProviderRefusal, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.byName[provider]; cur != nil {
		return cur.view(), true
	}
	return ProviderRefusal{}, false
}

// mayTry reports whether a media create may send to provider now: yes when it is not refusing;
// when it is, once per refusalRetry (the caller's create is the retry).
func (r *refusals) mayTry(provider string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.byName[provider]
	if cur == nil {
		return true
	}
	if now.Before(cur.nextRetry()) {
		return false
	}
	cur.retried = now
	return true
}

// forgetAll clears every refusal (a config reload) and returns the providers it cleared.
func (r *refusals) forgetAll() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.byName))
	for name := range r.byName {
		names = append(names, name)
	}
	sort.Strings(names)
	r.byName = nil
	return names
}

// reconfigured forgets the refusals of providers whose configuration changed (a new key, a new
// address): the next attempt says whether the change fixed it.
func (r *refusals) reconfigured(old, cur map[string]*ir.Provider) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.byName {
		o, n := old[name], cur[name]
		if o == nil || n == nil || *o != *n {
			delete(r.byName, name)
		}
	}
}

// reason says why provider cannot take traffic because of a refusal ("" : it has not refused).
func (r *refusals) reason(provider string) string {
	rf, ok := r.get(provider)
	if !ok {
		return ""
	}
	return fmt.Sprintf("provider %s refused the gateway's credential (%d times since %s, last at %s); it is tried again from %s, or at a config reload: check its api_key",
		provider, rf.Count, rf.Since.Format(time.RFC3339), rf.Last.Format(time.RFC3339), rf.NextRetry.Format(time.RFC3339))
}

// ProviderRefusal is provider's refusal of the gateway's credential, if it is refusing (admin
// status and health).
func (s *Server) ProviderRefusal(provider string) (ProviderRefusal, bool) {
	return s.refusals.get(provider)
}

// RetryRefusedProviders forgets every provider's refusal, so the next request tries each (a
// config reload: its credentials were read again).
func (s *Server) RetryRefusedProviders() {
	if names := s.refusals.forgetAll(); len(names) > 0 {
		s.sh.Log.Info("config reloaded: providers that refused the gateway's credential are tried again", "providers", strings.Join(names, ","))
	}
}

// providerRefused records that provider refused the gateway's credential just now.
func (s *Server) providerRefused(provider string) { s.providerRefusedAt(provider, time.Now()) }

// providerRefusedAt records that provider refused the gateway's credential at at.
func (s *Server) providerRefusedAt(provider string, at time.Time) {
	log, rf := s.refusals.refused(provider, at)
	if !log {
		return
	}
	// One line, naming the provider and never the key.
	s.sh.Log.Error("PROVIDER REFUSED THE GATEWAY'S CREDENTIAL: fix the provider's api_key; its models show is_ready false until it accepts it again (chat tries it with every request, media creates every 15 s, a config reload at once)",
		"provider", provider, "refusals", rf.count, "since", rf.since.UTC().Format(time.RFC3339))
}

// providerAnswered records an answer from provider that accepted the gateway's credential.
func (s *Server) providerAnswered(provider string) {
	if s.refusals.accepted(provider, time.Now()) {
		s.sh.Log.Info("provider accepts the gateway's credential again", "provider", provider)
	}
}

// RefusalLog is the access log service Envoy sends its logs to: the attempts a provider
// answered 401 (xds/translator refusals.go), the way Tollway learns of a refusal Envoy retried
// elsewhere without reading every attempt's response; and, on a split gateway, each split
// request's end (the answer log, answers.go).
type RefusalLog struct {
	accesslogv3.UnimplementedAccessLogServiceServer
	s *Server
}

// RefusalLog returns s's access log service.
func (s *Server) RefusalLog() *RefusalLog { return &RefusalLog{s: s} }

// StreamAccessLogs reads one Envoy worker's log stream until Envoy closes it. Its first message
// names the log; the ones after it do not.
func (l *RefusalLog) StreamAccessLogs(stream accesslogv3.AccessLogService_StreamAccessLogsServer) error {
	var name string
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		if id := msg.GetIdentifier(); id != nil {
			name = id.GetLogName()
		}
		switch name {
		case ir.RefusalLogName:
			for _, e := range msg.GetHttpLogs().GetLogEntry() {
				if p := e.GetCommonProperties().GetCustomTags()[ir.RefusalProviderTag]; p != "" && p != "-" {
					l.s.providerRefusedAt(p, refusedAt(e.GetCommonProperties()))
				}
			}
		case ir.AnswerLogName:
			l.s.answerEntries(msg.GetHttpLogs().GetLogEntry())
		}
	}
}

// refusedAt is when the attempt an entry logs was refused: when its answer's first byte came
// (the request's start when Envoy did not time it). Entries arrive a flush interval late, after
// answers that came later may have cleared the refusal.
func refusedAt(c *accesslogdatav3.AccessLogCommon) time.Time {
	if c.GetStartTime() == nil {
		return time.Now()
	}
	at := c.GetStartTime().AsTime()
	if d := c.GetTimeToFirstUpstreamRxByte(); d != nil {
		at = at.Add(d.AsDuration())
	}
	return at
}
