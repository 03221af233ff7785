package envoy_test

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollway/tollway/envoy"
)

var update = flag.Bool("update", false, "rewrite golden files (make testdata)")

func TestBootstrapGolden(t *testing.T) {
	b, err := envoy.Bootstrap(envoy.BootstrapConfig{
		XDS:     envoy.Endpoint{Network: "unix", Address: "/run/tollway/xds.sock"},
		ExtProc: envoy.Endpoint{Network: "tcp", Address: "127.0.0.1:9002"},
		Admin:   envoy.Endpoint{Network: "unix", Address: "/run/tollway/envoy-admin.sock"},
	})
	if err != nil {
		t.Fatal(err)
	}
	j, err := envoy.MarshalBootstrap(b)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(j)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	got, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	const path = "testdata/bootstrap.yaml"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `make testdata`)", err)
	}
	if string(got) != string(want) {
		t.Errorf("bootstrap differs from %s (run `make testdata` if intended):\n%s", path, got)
	}
}

func TestFindBinaryPrefersExplicitPath(t *testing.T) {
	dir := t.TempDir()
	bin := dir + "/envoy"
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := envoy.FindBinary(bin)
	if err != nil || got != bin {
		t.Fatalf("FindBinary(%q) = %q, %v", bin, got, err)
	}
	t.Setenv("ENVOY_BIN", "")
	t.Setenv("TOLLWAY_ENVOY_BIN", "")
	t.Setenv("PATH", dir)
	t.Chdir(t.TempDir())
	if got, err := envoy.FindBinary(""); err != nil || got != bin {
		t.Fatalf("FindBinary from PATH = %q, %v", got, err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := envoy.FindBinary(""); err == nil {
		t.Fatal("FindBinary found an envoy where there is none")
	}
}
