// Package xds is Tollway's control plane: it validates translated resources, versions them into
// go-control-plane snapshots, serves them to Envoy over ADS, and tracks what Envoy accepted.
// A snapshot Envoy rejects is reported loudly and the last accepted one is pushed back.
package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/tollway/tollway/xds/translator"
)

// NodeID is the node id of the Envoy Tollway starts itself (set in its bootstrap); Envoys
// Tollway does not start (`tollway bootstrap --node NAME`) have their own ids.
const NodeID = "tollway"

// ListenMetadata is the node metadata field that carries a node's own public listener
// (host:port), overriding listen.public for that node.
const ListenMetadata = "tollway_listen"

// ErrRejected means Envoy NACKed a snapshot.
var ErrRejected = errors.New("envoy rejected the configuration")

// Status is what the admin API shows about configuration delivery.
type Status struct {
	Version         uint64    `json:"version"`          // newest snapshot pushed
	AcceptedVersion uint64    `json:"accepted_version"` // newest snapshot Envoy ACKed on every type
	LastRejection   string    `json:"last_rejection,omitempty"`
	RejectedAt      time.Time `json:"rejected_at,omitzero"`
	Connected       bool      `json:"envoy_connected"`
}

// Server owns the snapshot cache.
type Server struct {
	log   *slog.Logger
	cache cachev3.SnapshotCache

	mu       sync.Mutex
	status   Status
	lastGood map[resource.Type][]types.Resource
	current  map[resource.Type][]types.Resource
	streams  int
	// rejectedVersion is the snapshot the last NACK answered.
	rejectedVersion uint64
	acked           map[string]uint64 // type URL -> version ACKed
	changed         chan struct{}     // closed and replaced on every ACK/NACK
	obs             Observer          // nil: nobody listens
}

// Observer hears of configuration delivery (metrics). Its methods are called with the server's
// lock held and must be quick; they must not call back into the server.
type Observer interface {
	// Pushed: a snapshot went into the cache; rollback when it is the last accepted one pushed
	// back after a rejection.
	Pushed(rollback bool)
	// Acked: Envoy accepted a snapshot's resources of one type (Cluster, Listener,
	// RouteConfiguration).
	Acked(kind string)
	// Rejected: Envoy refused a snapshot (reported once per snapshot, like the log line).
	Rejected(kind string)
}

// SetObserver makes o hear of every push, ACK and NACK from now on; call it before serving.
func (s *Server) SetObserver(o Observer) { s.obs = o }

// kindOf is a type URL's last part (type.googleapis.com/envoy.config.cluster.v3.Cluster ->
// Cluster): a bounded label.
func kindOf(typeURL string) string {
	return typeURL[strings.LastIndexByte(typeURL, '.')+1:]
}

// New makes a control plane with an empty cache.
func New(log *slog.Logger) *Server {
	return &Server{
		log:     log,
		cache:   cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		acked:   map[string]uint64{},
		changed: make(chan struct{}),
	}
}

// Register serves ADS on g.
func (s *Server) Register(ctx context.Context, g *grpc.Server) {
	srv := serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamOpenFunc:    s.onOpen,
		StreamClosedFunc:  s.onClosed,
		StreamRequestFunc: s.onRequest,
	})
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
}

// Status returns a copy of the delivery status.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Connected = s.streams > 0
	return st
}

// Push validates r, pushes it as the next snapshot version and, when an Envoy is connected,
// waits up to wait for it to be accepted. A rejection returns ErrRejected; the last accepted
// snapshot is then pushed back under a new version.
func (s *Server) Push(ctx context.Context, r *translator.Resources, wait time.Duration) (uint64, error) {
	// Every type gets an entry, empty or not: the cache answers a type only when its version
	// differs from the one Envoy holds, and a type left out has no version, so Envoy would wait
	// for it (an empty catalog has no clusters) and never acknowledge the snapshot.
	res := map[resource.Type][]types.Resource{resource.ListenerType: {}, resource.RouteType: {}, resource.ClusterType: {}}
	for _, l := range r.Listeners {
		res[resource.ListenerType] = append(res[resource.ListenerType], l)
	}
	for _, rc := range r.Routes {
		res[resource.RouteType] = append(res[resource.RouteType], rc)
	}
	for _, c := range r.Clusters {
		res[resource.ClusterType] = append(res[resource.ClusterType], c)
	}
	for _, list := range res {
		for _, m := range list {
			if err := Validate(m); err != nil {
				return 0, fmt.Errorf("xds: %s %q fails validation: %w", typeName(m), cachev3.GetResourceName(m), err)
			}
		}
	}
	s.mu.Lock()
	v := s.status.Version + 1
	if err := s.set(ctx, v, res); err != nil {
		s.mu.Unlock()
		return 0, err
	}
	s.status.Version = v
	s.current = res
	if s.obs != nil {
		s.obs.Pushed(false)
	}
	connected := s.streams > 0
	s.mu.Unlock()
	if !connected || wait <= 0 {
		return v, nil
	}
	return v, s.WaitAccepted(ctx, v, wait)
}

func (s *Server) set(ctx context.Context, v uint64, res map[resource.Type][]types.Resource) error {
	snap, err := cachev3.NewSnapshot(strconv.FormatUint(v, 10), res)
	if err != nil {
		return fmt.Errorf("xds: snapshot %d: %w", v, err)
	}
	if err := snap.Consistent(); err != nil {
		return fmt.Errorf("xds: snapshot %d is inconsistent: %w", v, err)
	}
	if err := s.cache.SetSnapshot(ctx, NodeID, snap); err != nil {
		return fmt.Errorf("xds: set snapshot %d: %w", v, err)
	}
	return nil
}

// WaitAccepted blocks until version v is ACKed on every type, a NACK arrives after it was pushed,
// or the wait runs out.
func (s *Server) WaitAccepted(ctx context.Context, v uint64, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		accepted, rejectedErr, ch := s.status.AcceptedVersion, s.rejectionSince(v), s.changed
		s.mu.Unlock()
		if accepted >= v {
			return nil
		}
		if rejectedErr != nil {
			return rejectedErr
		}
		select {
		case <-ch:
		case <-timer.C:
			return fmt.Errorf("xds: envoy did not acknowledge snapshot %d within %s", v, wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// rejectionSince returns the rejection recorded for version v or later. Callers hold mu.
func (s *Server) rejectionSince(v uint64) error {
	if s.status.LastRejection == "" || s.rejectedVersion < v {
		return nil
	}
	return fmt.Errorf("%w (snapshot %d): %s", ErrRejected, s.rejectedVersion, s.status.LastRejection)
}

func (s *Server) onOpen(context.Context, int64, string) error {
	s.mu.Lock()
	s.streams++
	s.mu.Unlock()
	return nil
}

func (s *Server) onClosed(int64, *corev3.Node) {
	s.mu.Lock()
	s.streams--
	s.mu.Unlock()
}

func (s *Server) onRequest(_ int64, req *discoveryv3.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notify()
	if req.GetErrorDetail() != nil {
		bad := s.status.Version
		if s.rejectedVersion == bad {
			// Envoy re-requests after a NACK and the cache answers with the same bad snapshot
			// until it is replaced; report each bad snapshot once.
			return nil
		}
		s.rejectedVersion = bad
		full := req.GetErrorDetail().GetMessage()
		s.status.LastRejection = FirstLine(full)
		s.status.RejectedAt = time.Now().UTC()
		s.log.Error("ENVOY REJECTED CONFIGURATION; keeping the last accepted one",
			"snapshot", bad, "type", req.GetTypeUrl(), "accepted", s.status.AcceptedVersion, "error", s.status.LastRejection)
		s.log.Debug("the rejection in full", "snapshot", bad, "error", full)
		if s.obs != nil {
			s.obs.Rejected(kindOf(req.GetTypeUrl()))
		}
		if s.lastGood != nil {
			// Re-push the last good resources under a new version so the cache, and any Envoy
			// that reconnects, serve what Envoy accepted rather than what it refused.
			v := s.status.Version + 1
			if err := s.set(context.Background(), v, s.lastGood); err != nil {
				s.log.Error("rollback failed", "error", err)
				return nil
			}
			s.status.Version = v
			s.current = s.lastGood
			if s.obs != nil {
				s.obs.Pushed(true)
			}
		}
		return nil
	}
	v, err := strconv.ParseUint(req.GetVersionInfo(), 10, 64)
	if err != nil || req.GetResponseNonce() == "" {
		return nil // initial request of a stream
	}
	s.acked[req.GetTypeUrl()] = v
	if s.obs != nil {
		s.obs.Acked(kindOf(req.GetTypeUrl()))
	}
	for _, t := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
		if s.acked[t] < v {
			return nil
		}
	}
	if v > s.status.AcceptedVersion {
		s.status.AcceptedVersion = v
		if v == s.status.Version {
			s.lastGood = s.current
		}
	}
	return nil
}

// FirstLine shortens an Envoy error to its first line: Envoy appends the whole offending resource
// as a protobuf text dump (thousands of lines), after a "goo.gle/debugstr" marker.
func FirstLine(msg string) string {
	line, _, _ := strings.Cut(msg, "\n")
	line, _, _ = strings.Cut(line, "goo.gle/debugstr")
	return strings.TrimRight(line, " :\t\r")
}

func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func typeName(m types.Resource) string {
	return string(m.ProtoReflect().Descriptor().Name())
}
