package translator_test

import (
	"path/filepath"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tollway/tollway/test/golden"
	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

// TestGolden translates every testdata/in/<case>.yaml IR and compares the result with
// testdata/out/<case>.{listeners,routes,clusters}.yaml; an IR that fails validation or translation
// is compared with testdata/out/<case>.error.txt instead.
func TestGolden(t *testing.T) {
	for _, in := range golden.Inputs(t, "testdata/in/*.yaml") {
		name := golden.Case(in)
		t.Run(name, func(t *testing.T) {
			var g ir.Gateway
			if err := golden.DecodeYAML(in, &g); err != nil {
				t.Fatal(err)
			}
			res, err := translate(&g)
			if err != nil {
				golden.Compare(t, filepath.Join("testdata", "out", name+".error.txt"), []byte(err.Error()+"\n"))
				return
			}
			kinds := map[string][]proto.Message{}
			for _, l := range res.Listeners {
				kinds["listeners"] = append(kinds["listeners"], l)
			}
			for _, r := range res.Routes {
				kinds["routes"] = append(kinds["routes"], r)
			}
			for _, c := range res.Clusters {
				kinds["clusters"] = append(kinds["clusters"], c)
				checkALPN(t, c)
			}
			for _, kind := range []string{"listeners", "routes", "clusters"} {
				for _, m := range kinds[kind] {
					if err := xds.Validate(m); err != nil {
						t.Errorf("%s fails protoc-gen-validate: %v", kind, err)
					}
				}
				got, err := golden.ProtoYAML(kinds[kind]...)
				if err != nil {
					t.Fatal(err)
				}
				golden.Compare(t, filepath.Join("testdata", "out", name+"."+kind+".yaml"), got)
			}
		})
	}
	golden.Prune(t, "testdata/out/*")
}

// translate is what the gateway does with an IR: validate, then translate.
func translate(g *ir.Gateway) (*translator.Resources, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return translator.Translate(g)
}

// checkALPN: Envoy rejects a cluster that negotiates the protocol by ALPN (auto_config) without a
// TLS transport socket, and the rejection used to stop the gateway; every cluster must pass.
func checkALPN(t *testing.T, c *clusterv3.Cluster) {
	t.Helper()
	a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil {
		return
	}
	var opts httpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&opts); err != nil {
		t.Fatal(err)
	}
	if opts.GetAutoConfig() != nil && c.GetTransportSocket() == nil {
		t.Errorf("cluster %s: ALPN (auto_config) without a TLS transport socket", c.Name)
	}
	if len(c.GetLoadAssignment().GetEndpoints()) == 0 {
		t.Errorf("cluster %s has no endpoints: nothing may route to it", c.Name)
	}
}
