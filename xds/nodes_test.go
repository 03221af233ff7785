package xds

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// TestNodesAreForgotten: 1,000 node ids (a rollout of the sidecar manifest, one id per pod)
// connect over real gRPC, get their snapshot, and go away. Each is forgotten when its last
// stream closes: the node map and the cache's snapshots are back to the gateway's own node,
// and the next push renders that node alone.
func TestNodesAreForgotten(t *testing.T) {
	srv, conn := serveADS(t)
	l, err := ir.ParseListen("127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	res, err := translator.Translate(&ir.Gateway{Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	rendered := map[string]int{}
	render := func(n Node) (*translator.Resources, error) {
		mu.Lock()
		rendered[n.ID]++
		mu.Unlock()
		return res, nil
	}
	if _, err := srv.PushFor(context.Background(), render, 0); err != nil {
		t.Fatal(err)
	}
	const pods = 1000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 50)
	for i := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			connectOnce(t, conn, fmt.Sprintf("pod-%04d", i))
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		srv.mu.Lock()
		nodes := len(srv.nodes)
		srv.mu.Unlock()
		keys := len(srv.cache.GetStatusKeys())
		if nodes == 1 && keys <= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d nodes connected and left: %d nodes known, %d in the snapshot cache (want the gateway's own alone)", pods, nodes, keys)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range pods {
		if _, err := srv.cache.GetSnapshot(fmt.Sprintf("pod-%04d", i)); err == nil {
			t.Fatalf("pod-%04d's snapshot is still in the cache", i)
		}
	}
	mu.Lock()
	clear(rendered)
	mu.Unlock()
	if _, err := srv.PushFor(context.Background(), render, 0); err != nil {
		t.Fatal(err)
	}
	if len(rendered) != 1 || rendered[NodeID] != 1 {
		t.Fatalf("a push after the nodes left rendered %d nodes: %v", len(rendered), rendered)
	}
	if ns := srv.Nodes(); len(ns) > maxGoneNodes+1 {
		t.Fatalf("status lists %d nodes; at most %d that left are kept", len(ns), maxGoneNodes)
	}
}

// serveADS serves a fresh control plane over a unix socket and returns a client connection.
func serveADS(t *testing.T) (*Server, *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	gs := grpc.NewServer()
	srv.Register(ctx, gs)
	sock := filepath.Join(t.TempDir(), "xds.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return srv, conn
}

// connectOnce opens an ADS stream as node id, waits for its clusters, and closes the stream.
func connectOnce(t *testing.T, conn *grpc.ClientConn, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id}, TypeUrl: resource.ClusterType}); err != nil {
		t.Error(err)
		return
	}
	if r, err := stream.Recv(); err != nil || r.GetTypeUrl() != resource.ClusterType {
		t.Errorf("node %s: %v %v", id, r, err)
	}
}
