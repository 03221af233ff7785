// Package xds is Tollway's control plane: it validates translated resources, versions them into
// go-control-plane snapshots, serves them to Envoy over ADS, and tracks what Envoy accepted.
// A snapshot Envoy rejects is reported loudly and the last accepted one is pushed back.
package xds

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
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

// Status is what the admin API shows about configuration delivery, over every node: the
// newest version pushed, the version every connected node accepted, the latest rejection.
type Status struct {
	Version         uint64    `json:"version"`          // newest snapshot pushed
	AcceptedVersion uint64    `json:"accepted_version"` // newest snapshot every connected node ACKed on every type
	LastRejection   string    `json:"last_rejection,omitempty"`
	RejectedAt      time.Time `json:"rejected_at,omitzero"`
	Connected       bool      `json:"envoy_connected"`
}

// Node is one Envoy the control plane serves, as its bootstrap names it.
type Node struct {
	ID string `json:"id"`
	// Listen is the node's own public listener (host:port, from its metadata ListenMetadata);
	// "" means listen.public.
	Listen string `json:"listen,omitempty"`
}

// NodeStatus is one node's delivery, for `tollway status` and the admin API.
type NodeStatus struct {
	Node
	Connected       bool      `json:"connected"`
	Version         uint64    `json:"version"`          // the newest snapshot pushed to it
	AcceptedVersion uint64    `json:"accepted_version"` // the newest it ACKed on every type
	LastRejection   string    `json:"last_rejection,omitempty"`
	RejectedAt      time.Time `json:"rejected_at,omitzero"`
}

// Render makes a node's resources from the configuration being pushed.
type Render func(Node) (*translator.Resources, error)

// node is the control plane's state of one Envoy node: each has its own snapshot (its own
// listener), acknowledgements and rollback, so one node's NACK never changes another's config.
type node struct {
	NodeStatus
	streams         int
	acked           map[string]uint64 // type URL -> version ACKed
	current         map[resource.Type][]types.Resource
	lastGood        map[resource.Type][]types.Resource
	rejectedVersion uint64 // the snapshot its last NACK answered
}

// Server owns the snapshot cache.
type Server struct {
	log   *slog.Logger
	cache cachev3.SnapshotCache

	mu      sync.Mutex
	version uint64           // the newest version pushed to any node
	render  Render           // the configuration pushed last; nil before the first push
	nodes   map[string]*node // by node id: the connected ones, and NodeID (Tollway's own Envoy) always
	// gone are the nodes that left last (their last stream closed), newest last, at most
	// maxGoneNodes: forgotten (no snapshot, never rendered again), kept for status only.
	gone    []*node
	streams map[int64]string // ADS stream -> node id
	changed chan struct{}    // closed and replaced on every ACK/NACK
	obs     Observer         // nil: nobody listens
}

// maxGoneNodes bounds the nodes that left kept for status: each pod of a sidecar Deployment has
// its own node id, so every rollout brings new ones.
const maxGoneNodes = 64

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
	s := &Server{
		log:     log,
		cache:   cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		nodes:   map[string]*node{},
		streams: map[int64]string{},
		changed: make(chan struct{}),
	}
	s.nodes[NodeID] = newNode(Node{ID: NodeID})
	return s
}

func newNode(n Node) *node {
	return &node{NodeStatus: NodeStatus{Node: n}, acked: map[string]uint64{}}
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

// Status returns the delivery status over every node.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Version: s.version}
	var anyAccepted uint64
	first := true
	for n := range s.known() {
		anyAccepted = max(anyAccepted, n.AcceptedVersion)
		if n.streams > 0 {
			st.Connected = true
			if first || n.AcceptedVersion < st.AcceptedVersion {
				st.AcceptedVersion = n.AcceptedVersion
			}
			first = false
		}
		if n.RejectedAt.After(st.RejectedAt) {
			st.LastRejection, st.RejectedAt = n.LastRejection, n.RejectedAt
			if n.ID != NodeID {
				st.LastRejection = "node " + n.ID + ": " + n.LastRejection
			}
		}
	}
	if !st.Connected {
		st.AcceptedVersion = anyAccepted // what was accepted last, while nobody is connected
	}
	return st
}

// known yields every node status knows of: the connected ones, Tollway's own, and those that
// left last (gone). Callers hold mu.
func (s *Server) known() iter.Seq[*node] {
	return func(yield func(*node) bool) {
		for _, n := range s.nodes {
			if !yield(n) {
				return
			}
		}
		for _, n := range s.gone {
			if !yield(n) {
				return
			}
		}
	}
}

// Nodes returns the connected nodes, Tollway's own, and the last nodes that left (at most
// maxGoneNodes, shown disconnected), sorted by id.
func (s *Server) Nodes() []NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]NodeStatus, 0, len(s.nodes)+len(s.gone))
	for n := range s.known() {
		ns := n.NodeStatus
		ns.Connected = n.streams > 0
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Push pushes r to every node (each with the same listener): Render's simple case.
func (s *Server) Push(ctx context.Context, r *translator.Resources, wait time.Duration) (uint64, error) {
	return s.PushFor(ctx, func(Node) (*translator.Resources, error) { return r, nil }, wait)
}

// PushFor renders every known node's resources, validates them, pushes them as the next
// snapshot version and, when an Envoy is connected, waits up to wait for every connected node
// to accept it. A rejection returns ErrRejected; that node gets its last accepted snapshot
// back under a new version. A node that connects later gets render's resources for it.
func (s *Server) PushFor(ctx context.Context, render Render, wait time.Duration) (uint64, error) {
	s.mu.Lock()
	rendered := make(map[string]map[resource.Type][]types.Resource, len(s.nodes))
	for id, n := range s.nodes {
		res, err := resources(render, n.Node)
		if err != nil {
			s.mu.Unlock()
			return 0, err
		}
		rendered[id] = res
	}
	v := s.version + 1
	for id, res := range rendered {
		if err := s.set(ctx, id, v, res); err != nil {
			s.mu.Unlock()
			return 0, err
		}
		n := s.nodes[id]
		n.current, n.Version = res, v
	}
	s.version, s.render = v, render
	if s.obs != nil {
		s.obs.Pushed(false)
	}
	connected := len(s.streams) > 0
	s.mu.Unlock()
	if !connected || wait <= 0 {
		return v, nil
	}
	return v, s.WaitAccepted(ctx, v, wait)
}

// resources renders n's resources and validates every one of them.
func resources(render Render, n Node) (map[resource.Type][]types.Resource, error) {
	r, err := render(n)
	if err != nil {
		return nil, fmt.Errorf("xds: node %s: %w", n.ID, err)
	}
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
				return nil, fmt.Errorf("xds: %s %q fails validation: %w", typeName(m), cachev3.GetResourceName(m), err)
			}
		}
	}
	return res, nil
}

func (s *Server) set(ctx context.Context, nodeID string, v uint64, res map[resource.Type][]types.Resource) error {
	snap, err := cachev3.NewSnapshot(strconv.FormatUint(v, 10), res)
	if err != nil {
		return fmt.Errorf("xds: snapshot %d: %w", v, err)
	}
	if err := snap.Consistent(); err != nil {
		return fmt.Errorf("xds: snapshot %d is inconsistent: %w", v, err)
	}
	if err := s.cache.SetSnapshot(ctx, nodeID, snap); err != nil {
		return fmt.Errorf("xds: set snapshot %d for node %s: %w", v, nodeID, err)
	}
	return nil
}

// WaitAccepted blocks until every connected node accepted version v (or, for a node whose
// newest snapshot is older, that one), a node NACKs v or later, or the wait runs out.
func (s *Server) WaitAccepted(ctx context.Context, v uint64, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		done, rejectedErr, ch := s.acceptedLocked(v), s.rejectionSince(v), s.changed
		s.mu.Unlock()
		if rejectedErr != nil {
			return rejectedErr
		}
		if done {
			return nil
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

// acceptedLocked: every connected node holds v or its own newest snapshot. Callers hold mu.
func (s *Server) acceptedLocked(v uint64) bool {
	anyConnected := false
	for _, n := range s.nodes {
		if n.streams == 0 {
			continue
		}
		anyConnected = true
		if n.AcceptedVersion < min(v, n.Version) {
			return false
		}
	}
	if !anyConnected {
		// Nobody to wait for now: done if a node accepted it before.
		for n := range s.known() {
			if n.AcceptedVersion >= v {
				return true
			}
		}
		return false
	}
	return true
}

// rejectionSince returns the rejection a node recorded for version v or later. Callers hold mu.
func (s *Server) rejectionSince(v uint64) error {
	for n := range s.known() {
		if n.LastRejection != "" && n.rejectedVersion >= v {
			return fmt.Errorf("%w (snapshot %d, node %s): %s", ErrRejected, n.rejectedVersion, n.ID, n.LastRejection)
		}
	}
	return nil
}

func (s *Server) onOpen(context.Context, int64, string) error { return nil }

func (s *Server) onClosed(id int64, _ *corev3.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notify()
	if n := s.nodes[s.streams[id]]; n != nil {
		n.streams--
		if n.streams == 0 {
			s.log.Info("envoy node disconnected", "node", n.ID)
			s.forget(n)
		}
	}
	delete(s.streams, id)
}

// forget drops a node whose last stream closed: its snapshot leaves the cache and no push
// renders it again; a node that comes back is rendered afresh (attach). Tollway's own node
// stays: its Envoy is the gateway's, and gets its snapshot before it connects. The node's
// status is kept among the last maxGoneNodes that left. Callers hold mu.
func (s *Server) forget(n *node) {
	if n.ID == NodeID {
		return
	}
	delete(s.nodes, n.ID)
	s.cache.ClearSnapshot(n.ID)
	n.acked, n.current, n.lastGood = nil, nil, nil
	if len(s.gone) == maxGoneNodes {
		s.gone = slices.Delete(s.gone, 0, 1)
	}
	s.gone = append(s.gone, n)
}

// attach learns which node a stream serves from its first request; a node seen for the first
// time gets its snapshot (rendered from the configuration pushed last) before the cache
// answers it. Callers hold mu.
func (s *Server) attach(streamID int64, req *discoveryv3.DiscoveryRequest) *node {
	if id, ok := s.streams[streamID]; ok {
		return s.nodes[id]
	}
	pn := req.GetNode()
	if pn.GetId() == "" {
		return nil
	}
	listen := pn.GetMetadata().GetFields()[ListenMetadata].GetStringValue()
	n := s.nodes[pn.GetId()]
	if n == nil || n.Listen != listen {
		// A new node, or one that came back with another listener (a new process under the
		// same id): its snapshot is rendered for what it says now.
		if n == nil {
			n = newNode(Node{ID: pn.GetId()})
			s.nodes[n.ID] = n
			s.gone = slices.DeleteFunc(s.gone, func(g *node) bool { return g.ID == n.ID })
		}
		n.Listen, n.lastGood = listen, nil
		if s.render != nil {
			res, err := resources(s.render, n.Node)
			if err == nil {
				err = s.set(context.Background(), n.ID, s.version, res)
			}
			if err != nil {
				s.log.Error("no configuration for a new envoy node", "node", n.ID, "error", err)
			} else {
				n.current, n.Version = res, s.version
			}
		}
	}
	n.streams++
	s.streams[streamID] = n.ID
	s.log.Info("envoy node connected", "node", n.ID, "listen", cmp.Or(n.Listen, "listen.public"))
	return n
}

// errNoGoodConfig ends the ADS stream of a node that refused its configuration and has none it
// accepted to fall back to: the cache would answer its retry with the same snapshot at once,
// for ever; Envoy reconnects after its backoff instead, and gets the next push.
var errNoGoodConfig = errors.New("xds: the node refused its configuration and has no earlier one; retry after a change")

func (n *node) noGoodConfig() error {
	if n.lastGood == nil {
		return errNoGoodConfig
	}
	return nil
}

func (s *Server) onRequest(streamID int64, req *discoveryv3.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notify()
	n := s.attach(streamID, req)
	if n == nil {
		return errors.New("xds: a stream without a node id; the bootstrap must set node.id")
	}
	if req.GetErrorDetail() != nil {
		bad := n.Version
		if n.rejectedVersion == bad {
			// Envoy re-requests after a NACK and the cache answers with the same bad snapshot
			// until it is replaced; report each bad snapshot once.
			return n.noGoodConfig()
		}
		n.rejectedVersion = bad
		full := req.GetErrorDetail().GetMessage()
		n.LastRejection = FirstLine(full)
		n.RejectedAt = time.Now().UTC()
		s.log.Error("ENVOY REJECTED CONFIGURATION; keeping the last accepted one",
			"node", n.ID, "snapshot", bad, "type", req.GetTypeUrl(), "accepted", n.AcceptedVersion, "error", n.LastRejection)
		s.log.Debug("the rejection in full", "node", n.ID, "snapshot", bad, "error", full)
		if s.obs != nil {
			s.obs.Rejected(kindOf(req.GetTypeUrl()))
		}
		if n.lastGood != nil {
			// Re-push this node's last good resources under a new version so the cache, and
			// the node when it reconnects, serve what it accepted rather than what it refused.
			v := s.version + 1
			if err := s.set(context.Background(), n.ID, v, n.lastGood); err != nil {
				s.log.Error("rollback failed", "node", n.ID, "error", err)
				return nil
			}
			s.version = v
			n.current, n.Version = n.lastGood, v
			if s.obs != nil {
				s.obs.Pushed(true)
			}
		}
		return n.noGoodConfig()
	}
	v, err := strconv.ParseUint(req.GetVersionInfo(), 10, 64)
	if err != nil || req.GetResponseNonce() == "" {
		return nil // initial request of a stream
	}
	n.acked[req.GetTypeUrl()] = v
	if s.obs != nil {
		s.obs.Acked(kindOf(req.GetTypeUrl()))
	}
	for _, t := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType} {
		if n.acked[t] < v {
			return nil
		}
	}
	if v > n.AcceptedVersion {
		n.AcceptedVersion = v
		if v == n.Version {
			n.lastGood = n.current
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
