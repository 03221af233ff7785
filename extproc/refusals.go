package extproc

// Providers that refused the gateway's credential (HTTP 401): such a provider cannot serve
// anyone until its configuration changes or it answers again, so the catalog's is_ready and
// route health count it as down, and the operator is told loudly, once, rather than every
// client being told to change a valid key.

import (
	"errors"
	"io"
	"sync"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollway/tollway/xds/ir"
)

// refusalReminder is how often a provider that keeps refusing is logged again.
const refusalReminder = time.Minute

// refusals is the set of providers whose last answer was a 401.
type refusals struct {
	mu     sync.Mutex
	byName map[string]*refusal
}

type refusal struct {
	since, logged time.Time
	count         int
}

// refused records a 401 from provider; it reports whether to log (the first refusal, or the
// first after refusalReminder).
func (r *refusals) refused(provider string, now time.Time) (log bool, rf refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byName == nil {
		r.byName = map[string]*refusal{}
	}
	cur := r.byName[provider]
	if cur == nil {
		cur = &refusal{since: now}
		r.byName[provider] = cur
	}
	cur.count++
	if cur.logged.IsZero() || now.Sub(cur.logged) >= refusalReminder {
		cur.logged = now
		return true, *cur
	}
	return false, *cur
}

// accepted clears provider after an answer that was not a 401; it reports whether it had been
// refusing.
func (r *refusals) accepted(provider string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
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

// providerRefused records that provider answered 401 to the gateway's credential.
func (s *Server) providerRefused(provider string) {
	log, rf := s.refusals.refused(provider, time.Now())
	if !log {
		return
	}
	// One line, naming the provider and never the key.
	s.log.Error("PROVIDER REFUSED THE GATEWAY'S CREDENTIAL: fix the provider's api_key; its models show is_ready false until it answers again or its configuration changes",
		"provider", provider, "status", 401, "refusals", rf.count, "since", rf.since.UTC().Format(time.RFC3339))
}

// providerAnswered records an answer from provider that was not a 401.
func (s *Server) providerAnswered(provider string) {
	if s.refusals.accepted(provider) {
		s.log.Info("provider accepts the gateway's credential again", "provider", provider)
	}
}

// RefusalLog is the access log service Envoy's router sends the attempts a provider answered 401
// to (xds/translator refusals.go): the way Tollway learns of a refusal Envoy retried elsewhere,
// without reading every attempt's response.
type RefusalLog struct {
	accesslogv3.UnimplementedAccessLogServiceServer
	s *Server
}

// RefusalLog returns the access log service that feeds s's provider refusals.
func (s *Server) RefusalLog() *RefusalLog { return &RefusalLog{s: s} }

// StreamAccessLogs reads one Envoy worker's log stream until Envoy closes it.
func (l *RefusalLog) StreamAccessLogs(stream accesslogv3.AccessLogService_StreamAccessLogsServer) error {
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		if id := msg.GetIdentifier(); id != nil && id.GetLogName() != ir.RefusalLogName {
			continue // another log: none is configured, but never misread one
		}
		for _, e := range msg.GetHttpLogs().GetLogEntry() {
			if p := e.GetCommonProperties().GetCustomTags()[ir.RefusalProviderTag]; p != "" && p != "-" {
				l.s.providerRefused(p)
			}
		}
	}
}
