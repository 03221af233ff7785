package tasks

// The gateway's own provider calls for tasks (creation, status queries, file look-ups) go
// through Envoy like every provider request: to Envoy's internal loopback listener, which
// routes on the cluster header to the provider's cluster (its TLS, health checks, outlier
// detection and circuit breakers included).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollway/tollway/extproc/provider"
	"github.com/tollway/tollway/extproc/spans"
	"github.com/tollway/tollway/xds/ir"
)

// maxAnswer bounds a provider's task answer: small JSON envelopes, except Gemini's (I3), which
// carry the images in base64 (a 4 MB image is 5.6 MB; 48 MiB holds eight).
const maxAnswer = 48 << 20

// Envoy sends task requests to providers through Envoy's internal listener.
type Envoy struct {
	Addr   string       // the internal listener, host:port on loopback
	Client *http.Client // nil: a client with a 30 s timeout
}

// Answer is a provider's answer to one task request.
type Answer struct {
	Status int
	Body   []byte
}

// Do sends up to provider p and reads the answer.
func (e *Envoy) Do(ctx context.Context, p *ir.Provider, up *provider.Upstream) (Answer, error) {
	method := up.Method
	if method == "" {
		method = http.MethodPost
	}
	var body io.Reader
	if len(up.Body) > 0 {
		body = bytes.NewReader(up.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+e.Addr+p.BasePath+up.Path, body)
	if err != nil {
		return Answer{}, fmt.Errorf("tasks: request to %s: %w", p.Name, err)
	}
	req.Host = p.Authority()
	req.Header.Set(ir.ClusterHeader, p.ClusterName())
	req.Header.Set(ir.TaskHeader, "1") // the per-attempt filter lets it pass as it is
	// A traced request's create continues its trace through Envoy's internal listener.
	spans.Inject(trace.SpanContextFromContext(ctx), propagation.HeaderCarrier(req.Header))
	for k, v := range up.Headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	c := e.Client
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("tasks: provider %s unreachable through Envoy: %w", p.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return Answer{}, fmt.Errorf("tasks: provider %s answer: %w", p.Name, err)
	}
	if len(b) > maxAnswer {
		return Answer{}, fmt.Errorf("tasks: provider %s answered more than %d bytes", p.Name, maxAnswer)
	}
	return Answer{Status: resp.StatusCode, Body: b}, nil
}

var defaultClient = &http.Client{
	// Each call's context carries its deadline (a create 150 s, a refresh 3 s, a poll 30 s);
	// this only stops a call made without one.
	Timeout: 3 * time.Minute,
	// A provider's redirect is not followed: the internal listener only knows provider
	// clusters, and a redirect elsewhere would leave Envoy.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}
