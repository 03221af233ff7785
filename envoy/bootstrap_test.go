package envoy_test

import (
	"os"
	"testing"

	"github.com/tollway/tollway/envoy"
	"github.com/tollway/tollway/test/golden"
)

func TestBootstrapGolden(t *testing.T) {
	compareBootstrap(t, "testdata/bootstrap.yaml", envoy.BootstrapConfig{
		XDS:     envoy.Endpoint{Network: "unix", Address: "/run/tollway/xds.sock"},
		ExtProc: envoy.Endpoint{Network: "tcp", Address: "127.0.0.1:9002"},
		Admin:   envoy.Endpoint{Network: "unix", Address: "/run/tollway/envoy-admin.sock"},
	})
}

// compareBootstrap renders c's bootstrap and compares it with the golden file.
func compareBootstrap(t *testing.T, file string, c envoy.BootstrapConfig) {
	t.Helper()
	b, err := envoy.Bootstrap(c)
	if err != nil {
		t.Fatal(err)
	}
	j, err := envoy.MarshalBootstrap(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := golden.JSONYAML(j)
	if err != nil {
		t.Fatal(err)
	}
	golden.Compare(t, file, got)
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

// TestBootstrapExternalGolden: the bootstrap `tollway bootstrap` prints for an Envoy Tollway
// does not start: TCP endpoints (a host name becomes a STRICT_DNS cluster), its own node id,
// and its public listener in the node's metadata.
func TestBootstrapExternalGolden(t *testing.T) {
	compareBootstrap(t, "testdata/bootstrap-external.yaml", envoy.BootstrapConfig{
		XDS:     envoy.Endpoint{Network: "tcp", Address: "tollway-control.tollway.svc:18000"},
		ExtProc: envoy.Endpoint{Network: "tcp", Address: "10.0.0.7:18001"},
		Admin:   envoy.Endpoint{Network: "tcp", Address: "127.0.0.1:0"},
		Node:    "edge-1",
		Listen:  "0.0.0.0:8081",
	})
}
