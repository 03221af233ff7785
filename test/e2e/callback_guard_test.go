package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollway/tollway/test/fakeupstream"
)

// TestCallbackNeverReachesTheGateway: a tenant's callback_url can never point at the gateway's own
// listeners, whatever callbacks.allow_private says and however the address is spelled. Every TCP
// socket the gateway and its Envoy listen on (read from /proc: the public, admin and internal
// listeners; Envoy's admin, xDS and ext_proc are unix sockets) and the configured listen.xds and
// listen.extproc are refused at create with 400 invalid_callback_url, before any provider call,
// spelled as 127.0.0.1, localhost, [::ffff:127.0.0.1], 0x7f.1, 2130706433, 127.1 and more. The
// example of docs/configuration.md (allow_private: [127.0.0.1], no admin token) cannot pause a
// route or reload the configuration through a callback. Another loopback receiver is still reached,
// with no credentials, and a redirect it answers is not followed. With that allow-list, the IANA
// special-purpose addresses and IPv6 forms that embed 127.0.0.1 are refused.
func TestCallbackNeverReachesTheGateway(t *testing.T) {
	t.Parallel()
	fake := fakeupstream.Start(t, fakeupstream.Options{APIKey: providerKey})
	var mu sync.Mutex
	var got []*http.Request
	var followed int
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		followed++
		mu.Unlock()
	}))
	defer target.Close()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		http.Redirect(w, r, target.URL+"/followed", http.StatusTemporaryRedirect)
	}))
	defer hook.Close()
	xdsAddr, extAddr := freeAddr(t), freeAddr(t)
	body := v1Config(fake) + `routes:
  - {name: x, rule: priority_fallback, models: [hailuo-02]}
callbacks: {allow_private: ["0.0.0.0/0", "::/0"]}
`
	g := startGateway(t, body, "FAKE_PROVIDER_KEY="+providerKey, "TOLLWAY_LISTEN_XDS="+xdsAddr, "TOLLWAY_LISTEN_EXTPROC="+extAddr)
	if err := g.NewAccount(context.Background(), "acme", "100"); err != nil {
		t.Fatal(err)
	}
	key := g.newKey("acme")
	create := func(cb string) (int, map[string]any) {
		t.Helper()
		return g.do("POST", key, "/videos", `{"model":"hailuo-02","prompt":"a fox","callback_url":"`+cb+`"}`)
	}
	// creates counts the video creates the provider got (the poller's queries of tasks created
	// meanwhile go on and are not counted).
	creates := func() int {
		n := 0
		for _, r := range fake.Requests() {
			if r.Path == "/v1/video_generation" {
				n++
			}
		}
		return n
	}
	refused := func(cb, why string) {
		t.Helper()
		before := creates()
		code, obj := create(cb)
		e, _ := obj["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if code != 400 || e["code"] != "invalid_callback_url" || !strings.Contains(msg, why) || creates() != before {
			t.Errorf("%s: %d %v; want 400 invalid_callback_url saying %q before any provider call", cb, code, obj, why)
		}
	}

	own := listeningTCP(t, g.Pid())
	envoyOwn := listeningTCP(t, g.EnvoyPID)
	if len(envoyOwn) != 2 { // the public listener and the internal one: Envoy's admin is a unix socket
		t.Errorf("Envoy listens on %v over TCP; want the public and internal listeners only", envoyOwn)
	}
	own = append(own, envoyOwn...)
	for _, a := range []string{xdsAddr, extAddr} {
		own = append(own, netip.MustParseAddrPort(a))
	}
	if len(own) < 5 {
		t.Fatalf("found only %v listening", own)
	}
	for _, ap := range own {
		p := strconv.Itoa(int(ap.Port()))
		for _, host := range []string{"127.0.0.1", "localhost", "LocalHost.", "app.localhost", "127.0.0.1.", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
			"[0:0:0:0:0:ffff:127.0.0.1]", "0x7f.1", "0x7f000001", "2130706433", "127.1", "0177.0.0.1", "127.0.1", "127.0.0.2", "[::1]",
			"0.0.0.0", "0", "[::]", "[::127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]"} {
			refused("http://"+host+":"+p+"/cb", "gateway")
		}
		refused("https://127.0.0.1:"+p+"/cb", "gateway")
	}
	// The configuration example: a route paused for everyone, the configuration reloaded.
	admin := netip.MustParseAddrPort(g.Admin)
	refused(fmt.Sprintf("http://127.0.0.1:%d/admin/v1/routes/route:x/pause", admin.Port()), "admin")
	refused(fmt.Sprintf("http://localhost:%d/admin/v1/reload", admin.Port()), "admin")
	pub := netip.MustParseAddrPort(g.Public)
	refused(fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/v1/videos", pub.Port()), "public")

	// Another loopback receiver, spelled localhost, is reached: no credentials, the redirect not
	// followed (the delivery counts as failed and is tried again).
	hookPort := hook.URL[strings.LastIndex(hook.URL, ":")+1:]
	if code, obj := create("http://localhost:" + hookPort + "/cb"); code != 200 {
		t.Fatalf("a loopback receiver allowed by allow_private: %d %v", code, obj)
	}
	waitFor(t, "two delivery attempts", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2
	})
	mu.Lock()
	for _, r := range got {
		if r.Header.Get("Authorization") != "" || r.Header.Get("Cookie") != "" || r.URL.User != nil {
			t.Errorf("a delivery carried credentials: %v", r.Header)
		}
	}
	if followed != 0 {
		t.Errorf("a redirect was followed %d times", followed)
	}
	mu.Unlock()
	_, routes := g.adminJSON("GET", "/admin/v1/routes", nil)
	for _, r := range routes["data"].([]any) {
		if r := r.(map[string]any); r["id"] == "route:x" && r["status"] != "active" {
			t.Fatalf("route:x was changed through a callback: %v", r)
		}
	}

	// The example's allow-list: special-purpose addresses, and IPv6 forms embedding 127.0.0.1
	// on a port that is not the gateway's, are refused.
	written, err := os.ReadFile(g.CfgPath)
	if err != nil {
		t.Fatal(err)
	}
	narrowed := strings.Replace(string(written), `callbacks: {allow_private: ["0.0.0.0/0", "::/0"]}`, `callbacks: {allow_private: [127.0.0.1]}`, 1)
	if err := os.WriteFile(g.CfgPath, []byte(narrowed), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := g.adminJSON("POST", "/admin/v1/reload", nil); code != 200 {
		t.Fatalf("reload: %d %v", code, out)
	}
	for host, why := range map[string]string{
		"[::127.0.0.1]":                          "IPv4-compatible",
		"[64:ff9b::7f00:1]":                      "NAT64",
		"[64:ff9b:1::7f00:1]":                    "NAT64",
		"[2002:7f00:1::1]":                       "6to4",
		"[2001:0:4136:e378:8000:63bf:80ff:fffe]": "Teredo",
		"0.1.2.3":                                "0.0.0.0/8",
		"240.0.0.1":                              "240.0.0.0/4",
		"198.18.0.1":                             "benchmarking",
		"192.0.0.170":                            "192.0.0.0/24",
		"255.255.255.255":                        "broadcast",
		"224.0.0.1":                              "multicast",
		"192.0.2.1":                              "documentation",
		"[2001:db8::1]":                          "documentation",
		"[fe80::1%25lo]":                         "link-local",
		"169.254.169.254":                        "metadata",
		"100.100.100.200":                        "metadata",
	} {
		refused("http://"+host+":"+hookPort+"/cb", why)
	}
	if code, obj := create("http://127.0.0.1:" + hookPort + "/cb"); code != 200 {
		t.Fatalf("the allowed receiver after the reload: %d %v", code, obj)
	}
}

// listeningTCP lists the TCP sockets process pid listens on, from its file descriptors and the
// kernel's socket tables (/proc/<pid>/fd, /proc/<pid>/net/tcp{,6}).
func listeningTCP(t *testing.T, pid int) []netip.AddrPort {
	t.Helper()
	inodes := map[string]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if link, err := os.Readlink(dir + "/" + fd.Name()); err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var out []netip.AddrPort
	for _, table := range []string{"tcp", "tcp6"} {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			if ap := procAddr(t, f[1]); !slices.Contains(out, ap) { // Envoy's workers each hold one
				out = append(out, ap)
			}
		}
	}
	return out
}

// procAddr reads a /proc/net/tcp address: the IP as 32-bit words in host (little-endian)
// order, then the port, all hex.
func procAddr(t *testing.T, s string) netip.AddrPort {
	ipHex, portHex, _ := strings.Cut(s, ":")
	b, err := hex.DecodeString(ipHex)
	port, err2 := strconv.ParseUint(portHex, 16, 16)
	if err != nil || err2 != nil {
		t.Fatalf("/proc address %q", s)
	}
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	ip, _ := netip.AddrFromSlice(net.IP(b))
	return netip.AddrPortFrom(ip.Unmap(), uint16(port))
}
