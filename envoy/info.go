package envoy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// ServerInfo is what Envoy says of itself (admin /server_info), for `tollway status`.
type ServerInfo struct {
	Version string // e.g. "1.40.0", the release from Envoy's full build string
	State   string // LIVE, DRAINING, PRE_INITIALIZING, INITIALIZING
	Uptime  int64  // seconds since this Envoy started
}

// Info asks the running Envoy for its ServerInfo.
func (p *Process) Info(ctx context.Context) (ServerInfo, error) {
	body, code, err := p.adminCall(ctx, http.MethodGet, "/server_info")
	if err != nil {
		return ServerInfo{}, err
	}
	if code != http.StatusOK {
		return ServerInfo{}, fmt.Errorf("envoy /server_info: HTTP %d", code)
	}
	return parseServerInfo([]byte(body))
}

func parseServerInfo(raw []byte) (ServerInfo, error) {
	var si struct {
		Version string `json:"version"`
		State   string `json:"state"`
		Uptime  string `json:"uptime_current_epoch"` // a protobuf Duration: "12.5s"
	}
	if err := json.Unmarshal(raw, &si); err != nil {
		return ServerInfo{}, fmt.Errorf("envoy /server_info: %w", err)
	}
	out := ServerInfo{Version: releaseOf(si.Version), State: si.State}
	if up, ok := strings.CutSuffix(si.Uptime, "s"); ok {
		var secs float64
		if _, err := fmt.Sscanf(up, "%g", &secs); err == nil {
			out.Uptime = int64(secs)
		}
	}
	return out, nil
}

// releaseOf picks the release out of Envoy's build string
// ("<commit>/1.40.0/Clean/RELEASE/BoringSSL"); anything else is kept whole.
func releaseOf(build string) string {
	parts := strings.Split(build, "/")
	if len(parts) >= 2 && parts[1] != "" {
		return parts[1]
	}
	return build
}
