package config

import (
	"strings"
	"testing"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
	"github.com/tollway/tollway/xds/ir"
)

// TestTracingConfig: tracing is off without the section; tracing: {otlp_endpoint, sample_rate,
// service_name} reaches the IR (port 4317 by default, https is TLS on the system bundle); a bad
// endpoint, a rate outside 0..1, an empty service name, or a rate without an endpoint are
// refused naming the key and the fix.
func TestTracingConfig(t *testing.T) {
	configtest.ClearEnv(t)
	const base = "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\nstore: {path: data/t.db}\n"
	c, err := Load(configtest.Write(t, base))
	if err != nil {
		t.Fatal(err)
	}
	if c.IRTracing() != nil {
		t.Fatalf("tracing on by default: %+v", c.IRTracing())
	}
	c, err = Load(configtest.Write(t, base+`tracing: {otlp_endpoint: "http://collector:4317", sample_rate: 1.0, service_name: tollway}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := ir.Tracing{Host: "collector", Port: 4317, SampleRate: 1, ServiceName: "tollway"}
	if got := c.IRTracing(); got == nil || *got != want {
		t.Fatalf("IR: %+v, want %+v", got, want)
	}
	c, err = Load(configtest.Write(t, base+`tracing: {otlp_endpoint: "https://otel.example.com", sample_rate: 0.01}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.IRTracing(); got == nil || got.Port != 4317 || !got.TLS || got.CAFile == "" || got.SampleRate != 0.01 || got.ServiceName != "tollway" {
		t.Fatalf("https, defaults: %+v", got)
	}
	for _, bad := range []struct{ yaml, want string }{
		{`{otlp_endpoint: "collector:4317"}`, `tracing.otlp_endpoint "collector:4317": the scheme must be http or https; write the collector's OTLP/gRPC address as http://host:4317`},
		{`{otlp_endpoint: "grpc://collector:4317"}`, "the scheme must be http or https"},
		{`{otlp_endpoint: "http://collector:4317/v1/traces"}`, "OTLP/gRPC has no path"},
		{`{otlp_endpoint: "http://:4317"}`, "a host is required"},
		{`{otlp_endpoint: "http://collector:99999"}`, "the port must be 1 to 65535"},
		{`{otlp_endpoint: "http://collector:4317", sample_rate: 1.5}`, "tracing.sample_rate 1.5: give the share of requests to trace from 0 to 1"},
		{`{otlp_endpoint: "http://collector:4317", sample_rate: -0.1}`, "tracing.sample_rate -0.1"},
		{`{otlp_endpoint: "http://collector:4317", service_name: ""}`, `tracing.service_name "": give the name`},
		{`{sample_rate: 0.5}`, "tracing: sample_rate and service_name need tracing.otlp_endpoint"},
		{`{otlp_endpoint: "http://collector:4317", sample: 1}`, "tracing has unknown keys: sample"},
	} {
		_, err := Load(configtest.Write(t, base+"tracing: "+bad.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v\nwant %q", bad.yaml, err, bad.want)
		}
	}
}
