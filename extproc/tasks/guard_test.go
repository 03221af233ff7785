package tasks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return r[host], nil
}

// TestCheckCallbackURL: only http(s) URLs whose every address is public pass, unless the
// operator allowed the address; the refusal names the host, why and the fix.
func TestCheckCallbackURL(t *testing.T) {
	r := resolver{
		"hooks.example.com": {netip.MustParseAddr("93.184.216.34")},
		"rebind.example":    {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.7")},
		"meta.example":      {netip.MustParseAddr("169.254.169.254")},
		"v6.example":        {netip.MustParseAddr("fd00::1")},
	}
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	checkURLs(t, &Guard{Allow: NewAllowList(allow), Resolver: r}, map[string]string{
		"https://hooks.example.com/v":        "",
		"http://127.0.0.1:9000/cb":           "", // allowed by the operator
		"http://127.0.0.2/cb":                "loopback",
		"http://[::1]/cb":                    "loopback",
		"https://rebind.example/":            "private",
		"https://meta.example/":              "metadata",
		"http://169.254.169.254/":            "metadata",
		"http://169.254.1.1/":                "link-local",
		"https://v6.example/":                "private",
		"http://100.64.0.1/":                 "private",
		"http://[::ffff:10.1.1.1]/":          "private",
		"ftp://hooks.example.com/":           "http or https",
		"https://user:pw@hooks.example.com/": "credentials",
		"not a url":                          "http or https",
	})
}

// checkURLs checks each URL with g: want "" must pass, anything else must be refused saying it.
func checkURLs(t *testing.T, g *Guard, cases map[string]string) {
	t.Helper()
	for raw, want := range cases {
		err := g.CheckURL(context.Background(), raw)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want it to say %q", raw, err, want)
		}
	}
}

// testListeners: an admin listener on 127.0.0.1:9090 and a public one on every address
// (0.0.0.0:8080) of a machine whose interfaces hold 10.1.2.3 and 2001:470::5.
func testListeners() *Listeners {
	l := &Listeners{Local: func() []netip.Addr {
		return []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("2001:470::5")}
	}}
	l.Set("admin listener", netip.MustParseAddrPort("127.0.0.1:9090"))
	l.Set("public listener", netip.MustParseAddrPort("0.0.0.0:8080"))
	return l
}

// TestGuardNeverReachesTheGateway: with everything allowed, the gateway's own listeners are
// still refused however the address is spelled: IPv4-mapped and embedding IPv6 forms, legacy
// numeric forms, localhost names, a name resolving there, any loopback or interface address
// on a listener's port; other ports and other hosts pass.
func TestGuardNeverReachesTheGateway(t *testing.T) {
	g := &Guard{Allow: NewAllowList([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}),
		Own: testListeners(), Resolver: resolver{"evil.example": {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1")}}}
	for _, host := range []string{"127.0.0.1", "127.0.0.2", "127.255.255.254", "localhost", "LOCALHOST.", "a.b.localhost", "evil.example",
		"[::1]", "[::]", "0.0.0.0", "0", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "[::ffff:0:127.0.0.1]", "[64:ff9b::7f00:1]",
		"[64:ff9b:1:7f00:1::]", "[2002:7f00:1::]", "[2001:0:7f00:1::]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]", "[2001:470::5efe:7f00:1]",
		"0x7f.1", "0x7f000001", "2130706433", "127.1", "127.0.1", "0177.0.0.1", "0x7F.0.0.01", "127.0.0.1."} {
		for _, port := range []string{"9090", "8080"} {
			raw := "http://" + host + ":" + port + "/admin/v1/reload"
			if err := g.CheckURL(context.Background(), raw); err == nil || !strings.Contains(err.Error(), "the gateway's own") {
				t.Errorf("%s: %v", raw, err)
			}
		}
	}
	checkURLs(t, g, map[string]string{
		"http://10.1.2.3:8080/":       "public listener", // an interface address on the wildcard listener's port
		"http://[2001:470::5]:8080/":  "public listener",
		"http://10.1.2.3:9090/":       "admin listener", // refused too: this machine, the admin port
		"http://[::ffff:10.1.2.3]:80": "",               // another port
		"http://10.1.2.4:8080/":       "",               // another host
		"http://127.0.0.1:9091/":      "",
		"https://127.0.0.1/":          "",
		"http://127.0.0.1:99999/":     "65535",
		"http://127.0.0.1:0/":         "65535",
		"http://1.2.3.4.5/":           "neither a host name nor an IP",
		"http://0x100000000/":         "neither a host name nor an IP",
		"http://256.1/":               "neither a host name nor an IP",
		"http://1.2.3.0x/":            "write it as 1.2.3.0",
		"http://93.184.216.034/":      "write it as 93.184.216.28",
	})
}

// TestGuardRefusesSpecialPurpose: with the allow-list of docs/configuration.md (127.0.0.1), every
// IANA special-purpose range is refused by name, and so is an IPv6 form carrying a refused IPv4
// address (the wrapper's range allowed, the IPv4 inside not); an address allowed by the list passes
// in every spelling of itself.
func TestGuardRefusesSpecialPurpose(t *testing.T) {
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("2002::/16")}
	g := &Guard{Allow: NewAllowList(allow), Own: &Listeners{Local: func() []netip.Addr { return nil }}}
	for host, want := range map[string]string{
		"0.1.2.3": "this network", "240.0.0.1": "240.0.0.0/4", "198.18.0.1": "benchmarking", "198.19.255.255": "benchmarking",
		"192.0.0.170": "192.0.0.0/24", "255.255.255.255": "broadcast", "224.0.0.251": "multicast", "192.0.2.1": "documentation",
		"198.51.100.7": "documentation", "203.0.113.9": "documentation", "192.88.99.1": "6to4 relay", "192.31.196.1": "AS112",
		"192.52.193.1": "AMT", "192.175.48.1": "AS112", "10.0.0.1": "private", "172.16.0.1": "private", "192.168.1.1": "private",
		"100.64.0.1": "CGNAT", "169.254.1.1": "link-local", "127.0.0.2": "loopback",
		"169.254.169.254": "metadata", "100.100.100.200": "metadata", "[fd00:ec2::254]": "metadata",
		"[::127.0.0.1]": "IPv4-compatible", "[::ffff:0:7f00:1]": "IPv4-translated", "[64:ff9b:1::7f00:1]": "local-use NAT64",
		"[64:ff9b::a00:1]": "private address (10.0.0.1) inside 64:ff9b::a00:1", "[2002:a00:1::1]": "private address (10.0.0.1) inside",
		"[2001:0:4136:e378:8000:63bf:80ff:fffe]": "Teredo", "[2001:2::1]": "IETF protocol assignment", "[2001:db8::1]": "documentation",
		"[3fff::1]": "documentation", "[100::1]": "discard-only", "[5f00::1]": "segment-routing", "[fc00::1]": "unique-local",
		"[fe80::1]": "link-local", "[fec0::1]": "site-local", "[ff02::1]": "multicast", "[::1]": "loopback", "[::]": "unspecified",
		"[4000::1]": "not a global unicast", "[2620:4f:8000::1]": "AS112", "[2001:470::5efe:a00:1]": "private address (10.0.0.1) inside",
		"[::ffff:10.1.1.1]": "private",
	} {
		raw := "http://" + host + ":8000/cb"
		if err := g.CheckURL(context.Background(), raw); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "allow_private") {
			t.Errorf("%s: %v, want it to say %q and name callbacks.allow_private", raw, err, want)
		}
	}
	for _, host := range []string{"127.0.0.1", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::1]", "93.184.216.34", "[2606:2800:220:1::1]", "[64:ff9b::5db8:d822]"} {
		if err := g.CheckURL(context.Background(), "http://"+host+":8000/cb"); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	// Metadata addresses pass only when named alone, not through a range around them.
	g.Allow.Set([]netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")})
	if err := g.CheckURL(context.Background(), "http://169.254.169.254/"); err == nil {
		t.Error("metadata allowed through a range")
	}
	g.Allow.Set([]netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")})
	if err := g.CheckURL(context.Background(), "http://169.254.169.254/"); err != nil {
		t.Errorf("metadata named alone: %v", err)
	}
}

// TestNumericHost: the WHATWG URL standard's IPv4 forms.
func TestNumericHost(t *testing.T) {
	for in, want := range map[string]string{
		"0x7f.1": "127.0.0.1", "2130706433": "127.0.0.1", "127.1": "127.0.0.1", "0177.0.0.1": "127.0.0.1", "127.0.1": "127.0.0.1",
		"0x7f000001": "127.0.0.1", "0": "0.0.0.0", "0x": "0.0.0.0", "1.2.3.4.": "1.2.3.4", "4294967295": "255.255.255.255",
		"1.2.0x10000": "", "1.256.1": "", "4294967296": "", "1.2.3.4.5": "", "1..2": "", "08": "", "0x7g": "-", "example.com": "-",
		"a.1": "", "1.a": "-", "": "-",
	} {
		a, numeric, ok := numericHost(in)
		switch want {
		case "-":
			if numeric {
				t.Errorf("%q read as numeric", in)
			}
		case "":
			if !numeric || ok {
				t.Errorf("%q: numeric %v ok %v %s, want invalid", in, numeric, ok, a)
			}
		default:
			if !ok || a.String() != want {
				t.Errorf("%q: %s %v, want %s", in, a, ok, want)
			}
		}
	}
}

// TestCallbackClientRefusesTheGatewayAtConnect: a URL that passed creation (a name that
// resolved elsewhere then, DNS rebinding) is checked again at each connection: the delivery
// client refuses the gateway's own listener, whatever the allow-list.
func TestCallbackClientRefusesTheGatewayAtConnect(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	own := &Listeners{}
	g := &Guard{Allow: NewAllowList([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}), Own: own}
	c := NewCallbackClient(g)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	resp, err := c.Post("http://localhost:"+port+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("before it is the gateway's: %v", err)
	}
	resp.Body.Close()
	own.Set("admin listener", netip.MustParseAddrPort(srv.Listener.Addr().String()))
	for _, u := range []string{srv.URL, "http://localhost:" + port + "/"} {
		if _, err := c.Post(u, "application/json", strings.NewReader("{}")); err == nil || !strings.Contains(err.Error(), "admin listener") {
			t.Errorf("%s: %v", u, err)
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("the listener got %d requests, want 1 (before it was the gateway's)", hits.Load())
	}
}

// FuzzCallbackGuard: whatever the URL, the guard never panics, an accepted URL's host is an
// address (or a name resolving to one) that is public or allowed and not the gateway's, and an
// address it accepts in one IPv6 spelling it accepts as IPv4 too.
func FuzzCallbackGuard(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:9090/admin/v1/reload", "http://[::ffff:127.0.0.1]:9090/", "http://0x7f.1:8080/", "http://2130706433/",
		"https://hooks.example.com/v", "http://[64:ff9b::7f00:1]/", "http://[2002:7f00:1::]:9090/", "http://93.184.216.34:8080/", "http://a.localhost:9090/",
		"http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "http://127.1:9090/", "http://[fe80::1%25eth0]:8000/", "http://0177.0.0.1./"} {
		f.Add(s)
	}
	pub := netip.MustParseAddr("93.184.216.34")
	g := &Guard{Allow: NewAllowList([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("64:ff9b::/96")}),
		Own: testListeners(), Resolver: resolver{"hooks.example.com": {pub}}}
	f.Fuzz(func(t *testing.T, raw string) {
		err := g.CheckURL(context.Background(), raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "callback_url") {
				t.Fatalf("%q: error %q does not name callback_url", raw, err)
			}
			return
		}
		u, _ := http.NewRequest("POST", raw, nil)
		a, perr := netip.ParseAddr(u.URL.Hostname())
		if perr != nil {
			if u.URL.Hostname() != "hooks.example.com" {
				t.Fatalf("%q accepted with host %q", raw, u.URL.Hostname())
			}
			a = pub
		}
		port, _ := urlPort(u.URL)
		for _, c := range append([]netip.Addr{a.WithZone("").Unmap()}, embeddedIPv4(a.WithZone("").Unmap())...) {
			if name := g.Own.reaches(c, port); name != "" {
				t.Fatalf("%q accepted: reaches the %s", raw, name)
			}
			if why := specialWhy(c); why != "" && c != netip.MustParseAddr("127.0.0.1") && !nat64.Contains(c) {
				t.Fatalf("%q accepted: %s is %s", raw, c, why)
			}
		}
	})
}

// FuzzNumericHost: every IPv4 address written in any legacy form (1 to 4 parts, each decimal,
// octal or hex) reads back as itself, and no input panics or reads as an address without
// being numeric.
func FuzzNumericHost(f *testing.F) {
	f.Add(uint32(0x7f000001), uint8(0), "0x7f.1")
	f.Add(uint32(0xffffffff), uint8(0x1b), "2130706433")
	f.Add(uint32(0), uint8(0x2e), "127.1.")
	f.Fuzz(func(t *testing.T, v uint32, form uint8, raw string) {
		if a, numeric, ok := numericHost(raw); ok && (!numeric || !a.Is4()) {
			t.Fatalf("%q: %s numeric %v", raw, a, numeric)
		}
		parts := int(form%4) + 1
		vals := make([]uint64, parts)
		rest := uint64(v)
		for i := range parts - 1 { // leading parts take one byte each, the last the rest
			vals[i] = uint64(v>>(24-8*uint(i))) & 0xff
		}
		rest &= 1<<(8*uint(5-parts)) - 1
		vals[parts-1] = rest
		var b strings.Builder
		for i, n := range vals {
			if i > 0 {
				b.WriteByte('.')
			}
			switch (form >> (2 + uint(i)%3)) % 3 {
			case 0:
				b.WriteString(strconv.FormatUint(n, 10))
			case 1:
				b.WriteString("0" + strconv.FormatUint(n, 8))
			default:
				b.WriteString("0x" + strconv.FormatUint(n, 16))
			}
		}
		a, numeric, ok := numericHost(b.String())
		if !numeric || !ok || a != netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}) {
			t.Fatalf("%q (%d parts of %08x): %s numeric %v ok %v", b.String(), parts, v, a, numeric, ok)
		}
	})
}

// FuzzEmbeddedIPv4: every IPv6 form that carries an IPv4 address gives it back, and with
// everything allowed a loopback address carried in any of them is still refused on the
// gateway's admin port.
func FuzzEmbeddedIPv4(f *testing.F) {
	f.Add(uint32(0x7f000001), uint8(0), uint64(0))
	f.Add(uint32(0x0a000001), uint8(7), uint64(0x20010470))
	g := &Guard{Allow: NewAllowList([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}), Own: testListeners()}
	f.Fuzz(func(t *testing.T, v uint32, form uint8, prefix uint64) {
		b4 := [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
		var b [16]byte
		switch form % 10 {
		case 0: // IPv4-compatible
			copy(b[12:], b4[:])
		case 1: // IPv4-translated
			b[8], b[9] = 0xff, 0xff
			copy(b[12:], b4[:])
		case 2: // NAT64 well-known
			copy(b[:], netip.MustParseAddr("64:ff9b::").AsSlice())
			copy(b[12:], b4[:])
		case 3: // local-use NAT64, /48
			copy(b[:], netip.MustParseAddr("64:ff9b:1::").AsSlice())
			b[6], b[7], b[9], b[10] = b4[0], b4[1], b4[2], b4[3]
		case 4: // /56
			copy(b[:], netip.MustParseAddr("64:ff9b:1::").AsSlice())
			b[7], b[9], b[10], b[11] = b4[0], b4[1], b4[2], b4[3]
		case 5: // /64
			copy(b[:], netip.MustParseAddr("64:ff9b:1::").AsSlice())
			copy(b[9:], b4[:])
		case 6: // 6to4
			b[0], b[1] = 0x20, 0x02
			copy(b[2:], b4[:])
		case 7: // ISATAP under any global prefix
			for i := range 8 {
				b[i] = byte(prefix >> (56 - 8*uint(i)))
			}
			b[0] = 0x20 | b[0]&0x1f
			b[10], b[11] = 0x5e, 0xfe
			copy(b[12:], b4[:])
		case 8: // Teredo server
			b[0], b[1] = 0x20, 0x01
			copy(b[4:], b4[:])
		default: // Teredo client, obfuscated
			b[0], b[1] = 0x20, 0x01
			for i := range 4 {
				b[12+i] = ^b4[i]
			}
		}
		a := netip.AddrFrom16(b)
		v4 := netip.AddrFrom4(b4)
		if a.Is4In6() {
			return // IPv4-mapped: Unmap'ed before any of this
		}
		found := false
		for _, e := range embeddedIPv4(a) {
			found = found || e == v4
		}
		if !found {
			t.Fatalf("%s (form %d): %v does not hold %s", a, form%10, embeddedIPv4(a), v4)
		}
		if v4.IsLoopback() && g.refusal(netip.AddrPortFrom(a, 9090)) == "" {
			t.Fatalf("%s carries %s and reached the admin port", a, v4)
		}
	})
}
