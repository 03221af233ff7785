package translator_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tollway/tollway/xds"
	"github.com/tollway/tollway/xds/ir"
	"github.com/tollway/tollway/xds/translator"
)

var update = flag.Bool("update", false, "rewrite golden files (make testdata)")

// TestGolden translates every testdata/in/<case>.yaml IR and compares the result with
// testdata/out/<case>.{listeners,routes,clusters}.yaml.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/in/*.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			var g ir.Gateway
			if err := decodeYAML(in, &g); err != nil {
				t.Fatal(err)
			}
			if err := g.Validate(); err != nil {
				t.Fatalf("input IR is invalid: %v", err)
			}
			res, err := translator.Translate(&g)
			if err != nil {
				t.Fatal(err)
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
				got, err := MessagesYAML(kinds[kind])
				if err != nil {
					t.Fatal(err)
				}
				CompareGolden(t, filepath.Join("testdata", "out", name+"."+kind+".yaml"), got, *update)
			}
		})
	}
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

func decodeYAML(path string, out any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(j)))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

// MessagesYAML renders protos as stable YAML (protojson field names, sorted keys).
func MessagesYAML(ms []proto.Message) ([]byte, error) {
	var docs []any
	for _, m := range ms {
		j, err := protojson.Marshal(m)
		if err != nil {
			return nil, err
		}
		var v any
		dec := json.NewDecoder(strings.NewReader(string(j)))
		dec.UseNumber() // keep integers as written, not as floats
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		docs = append(docs, v)
	}
	return yaml.Marshal(docs)
}

// CompareGolden fails t when got differs from the file at path, or rewrites it with update.
func CompareGolden(t *testing.T, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `make testdata` to create it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from the translation (run `make testdata` if the change is intended):\n--- got ---\n%s", path, got)
	}
}
