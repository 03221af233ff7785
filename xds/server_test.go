package xds_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// fakeEnvoy speaks ADS like Envoy does: it subscribes to clusters and listeners, then to the
// route configuration, and ACKs (or NACKs) what arrives.
type fakeEnvoy struct {
	t      *testing.T
	stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	got    chan *discoveryv3.DiscoveryResponse
}

func startControlPlane(t *testing.T) (*xds.Server, *fakeEnvoy) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := xds.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEnvoy{t: t, stream: stream, got: make(chan *discoveryv3.DiscoveryResponse, 16)}
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(e.got)
				return
			}
			e.got <- r
		}
	}()
	return srv, e
}

func (e *fakeEnvoy) send(typeURL, version, nonce string, names []string, nack string) {
	e.t.Helper()
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: xds.NodeID}, TypeUrl: typeURL,
		VersionInfo: version, ResponseNonce: nonce, ResourceNames: names}
	if nack != "" {
		req.ErrorDetail = &status.Status{Code: 3, Message: nack}
	}
	if err := e.stream.Send(req); err != nil {
		e.t.Fatal(err)
	}
}

// next waits for the next response; an empty type answered nothing before the fix.
func (e *fakeEnvoy) next(want string) *discoveryv3.DiscoveryResponse {
	e.t.Helper()
	select {
	case r := <-e.got:
		if r == nil || r.TypeUrl != want {
			e.t.Fatalf("got %v, want a %s response", r, want)
		}
		return r
	case <-time.After(3 * time.Second):
		e.t.Fatalf("no %s response within 3s", want)
	}
	return nil
}

func emptyGateway(t *testing.T) *translator.Resources {
	t.Helper()
	l, err := ir.ParseListen("127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	res, err := translator.Translate(&ir.Gateway{Listener: l})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Clusters) != 0 {
		t.Fatalf("an empty catalog translated to %d clusters", len(res.Clusters))
	}
	return res
}

// TestEmptyCatalogIsAcknowledged: a snapshot without clusters is still answered on every type,
// so Envoy can acknowledge it (it used to wait for clusters forever and start-up failed).
func TestEmptyCatalogIsAcknowledged(t *testing.T) {
	srv, envoy := startControlPlane(t)
	if _, err := srv.Push(context.Background(), emptyGateway(t), 0); err != nil {
		t.Fatal(err)
	}
	envoy.send(resource.ClusterType, "", "", nil, "")
	cds := envoy.next(resource.ClusterType)
	if len(cds.Resources) != 0 || cds.VersionInfo != "1" {
		t.Fatalf("clusters: version %q, %d resources", cds.VersionInfo, len(cds.Resources))
	}
	envoy.send(resource.ClusterType, cds.VersionInfo, cds.Nonce, nil, "")
	envoy.send(resource.ListenerType, "", "", nil, "")
	lds := envoy.next(resource.ListenerType)
	envoy.send(resource.ListenerType, lds.VersionInfo, lds.Nonce, nil, "")
	envoy.send(resource.RouteType, "", "", []string{ir.RouteConfigName}, "")
	rds := envoy.next(resource.RouteType)
	envoy.send(resource.RouteType, rds.VersionInfo, rds.Nonce, []string{ir.RouteConfigName}, "")
	if err := srv.WaitAccepted(context.Background(), 1, 3*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRejectionIsShortened: Envoy's NACK carries the whole resource as a protobuf dump; status
// and log keep only its first line.
func TestRejectionIsShortened(t *testing.T) {
	srv, envoy := startControlPlane(t)
	if _, err := srv.Push(context.Background(), emptyGateway(t), 0); err != nil {
		t.Fatal(err)
	}
	envoy.send(resource.ClusterType, "", "", nil, "")
	cds := envoy.next(resource.ClusterType)
	dump := "Error adding/updating cluster(s) chain.model.x: ALPN configured for cluster chain.model.x which has a non-ALPN transport socket: goo.gle/debugstr    \nname: \"chain.model.x\"\ntype: STRICT_DNS\n" + strings.Repeat("connect_timeout {\n  seconds: 5\n}\n", 500)
	envoy.send(resource.ClusterType, "", cds.Nonce, nil, dump)
	err := srv.WaitAccepted(context.Background(), 1, 3*time.Second)
	want := "Error adding/updating cluster(s) chain.model.x: ALPN configured for cluster chain.model.x which has a non-ALPN transport socket"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("WaitAccepted: %v", err)
	}
	if got := srv.Status().LastRejection; got != want {
		t.Fatalf("last rejection %q", got)
	}
}
