package envoy

import "testing"

func TestParseServerInfo(t *testing.T) {
	si, err := parseServerInfo([]byte(`{"version":"4c1e7e1b0f1a/1.40.0/Clean/RELEASE/BoringSSL","state":"LIVE","uptime_current_epoch":"125.5s","command_line_options":{}}`))
	if err != nil || si != (ServerInfo{Version: "1.40.0", State: "LIVE", Uptime: 125}) {
		t.Fatalf("got %+v %v", si, err)
	}
	if _, err := parseServerInfo([]byte(`<html>`)); err == nil {
		t.Fatal("a non-JSON answer was read")
	}
	if si, _ := parseServerInfo([]byte(`{"version":"dev"}`)); si.Version != "dev" {
		t.Fatalf("an unusual build string: %+v", si)
	}
}
