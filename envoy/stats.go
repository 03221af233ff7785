package envoy

import (
	"context"
	"fmt"
	"net/http"
)

// PrometheusStats asks Envoy's admin API for its stats in Prometheus text format
// (/stats/prometheus; usedOnly: only the stats that were ever written). The caller reads and
// closes the answer's body.
func (p *Process) PrometheusStats(ctx context.Context, usedOnly bool) (*http.Response, error) {
	path := "/stats/prometheus"
	if usedOnly {
		path += "?usedonly"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://envoy"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.admin.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("envoy admin %s: %s", path, resp.Status)
	}
	return resp, nil
}
