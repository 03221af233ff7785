package tasks

// The address facts the callback guard (guard.go) decides on: the IANA special-purpose
// registries, the IPv6 forms that carry an IPv4 address, and the numeric host spellings
// (0x7f.1, 2130706433, 127.1) that resolvers and browsers read as IPv4.

import (
	"net/netip"
	"strconv"
	"strings"
)

// special is one range that is not an ordinary public unicast address.
type special struct {
	p   netip.Prefix
	why string
}

func sp(prefix, why string) special { return special{netip.MustParsePrefix(prefix), why} }

// specials are the IANA IPv4 and IPv6 Special-Purpose Address Registries (as of 2025), the
// multicast ranges and the deprecated IPv6 forms, most specific first: the first match names it.
var specials = []special{
	sp("0.0.0.0/8", `a "this network" address (0.0.0.0/8)`),
	sp("10.0.0.0/8", "a private address"),
	sp("100.64.0.0/10", "a private (CGNAT, 100.64.0.0/10) address"),
	sp("127.0.0.0/8", "a loopback address"),
	sp("169.254.0.0/16", "a link-local address"),
	sp("172.16.0.0/12", "a private address"),
	sp("192.0.0.0/24", "an IETF protocol assignment (192.0.0.0/24)"),
	sp("192.0.2.0/24", "a documentation address"),
	sp("192.31.196.0/24", "an AS112 DNS address"),
	sp("192.52.193.0/24", "an AMT address"),
	sp("192.88.99.0/24", "a 6to4 relay anycast address"),
	sp("192.168.0.0/16", "a private address"),
	sp("192.175.48.0/24", "an AS112 DNS address"),
	sp("198.18.0.0/15", "a benchmarking address"),
	sp("198.51.100.0/24", "a documentation address"),
	sp("203.0.113.0/24", "a documentation address"),
	sp("224.0.0.0/4", "a multicast address"),
	sp("255.255.255.255/32", "the broadcast address"),
	sp("240.0.0.0/4", "a reserved address (240.0.0.0/4)"),

	sp("::/128", "the unspecified address"),
	sp("::1/128", "a loopback address"),
	sp("::ffff:0:0/96", "an IPv4-mapped address"),
	sp("::ffff:0:0:0/96", "an IPv4-translated address (::ffff:0:0:0/96)"),
	sp("::/96", "an IPv4-compatible address (::/96, deprecated)"),
	sp("64:ff9b::/96", "a NAT64 address (64:ff9b::/96)"),
	sp("64:ff9b:1::/48", "a local-use NAT64 address (64:ff9b:1::/48)"),
	sp("100::/64", "a discard-only address"),
	sp("100:0:0:1::/64", "a dummy address (100:0:0:1::/64)"),
	sp("2001::/32", "a Teredo address"),
	sp("2001::/23", "an IETF protocol assignment (2001::/23)"),
	sp("2001:db8::/32", "a documentation address"),
	sp("2002::/16", "a 6to4 address"),
	sp("2620:4f:8000::/48", "an AS112 DNS address"),
	sp("3fff::/20", "a documentation address"),
	sp("5f00::/16", "a segment-routing address"),
	sp("fc00::/7", "a unique-local (private) address"),
	sp("fe80::/10", "a link-local address"),
	sp("fec0::/10", "a site-local address (deprecated)"),
	sp("ff00::/8", "a multicast address"),
}

// globalUnicast is the only IPv6 space assigned for public unicast; everything outside it is
// reserved or special.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// specialWhy says what kind of non-public address a is, or "" for an ordinary public one.
func specialWhy(a netip.Addr) string {
	for _, s := range specials {
		if s.p.Contains(a) {
			return s.why
		}
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return "not a global unicast address (outside 2000::/3)"
	}
	return ""
}

// metadata are cloud metadata services (AWS, GCP, Azure, Oracle; AWS over IPv6; Alibaba
// Cloud): refused unless the allow-list names the address itself, not only a range around it.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254"), netip.MustParseAddr("100.100.100.200"),
}

// IPv6 prefixes whose addresses carry an IPv4 address at a known place.
var (
	compatible = netip.MustParsePrefix("::/96")
	translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	teredo     = netip.MustParsePrefix("2001::/32")
	sixToFour  = netip.MustParsePrefix("2002::/16")
)

// embeddedIPv4 lists the IPv4 addresses an IPv6 address carries, wherever a translator, tunnel
// or host stack may deliver it: IPv4-compatible and -translated (the last 32 bits), NAT64
// (RFC 6052: the well-known /96, and every prefix length the local-use /48 allows), 6to4 (bits
// 16-47), Teredo (the server, and the client's obfuscated address) and ISATAP interface ids
// (any prefix). An IPv4-mapped address is Unmap'ed before this: it is an IPv4 address.
func embeddedIPv4(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	v4 := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	var out []netip.Addr
	switch {
	case compatible.Contains(a), translated.Contains(a), nat64.Contains(a):
		out = append(out, v4(12, 13, 14, 15))
	case nat64Local.Contains(a): // RFC 6052 section 2.2, prefix lengths /48, /56, /64, /96
		out = append(out, v4(6, 7, 9, 10), v4(7, 9, 10, 11), v4(9, 10, 11, 12), v4(12, 13, 14, 15))
	case teredo.Contains(a):
		out = append(out, v4(4, 5, 6, 7), netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
	case sixToFour.Contains(a):
		out = append(out, v4(2, 3, 4, 5))
	}
	if (b[8] == 0 || b[8] == 2) && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe { // ISATAP (RFC 5214)
		out = append(out, v4(12, 13, 14, 15))
	}
	return out
}

// numericHost reads host as the WHATWG URL standard's IPv4 parser does (and inet_aton, which
// resolvers use): when its last label is a number, the host is an IPv4 address in one of the
// legacy spellings (0x7f.1, 0177.0.0.1, 127.1, 2130706433) or invalid. numeric is false for a
// host name.
func numericHost(host string) (a netip.Addr, numeric, ok bool) {
	h := strings.TrimSuffix(host, ".")
	parts := strings.Split(h, ".")
	if last := parts[len(parts)-1]; last == "" || !endsInNumber(last) {
		return netip.Addr{}, false, false
	}
	if len(parts) > 4 {
		return netip.Addr{}, true, false
	}
	var v uint64
	for i, part := range parts {
		n, good := ipv4Part(part)
		rest := uint(4 - i) // bytes the part may fill: the last part fills what is left
		if i < len(parts)-1 {
			rest = 1
		}
		if !good || n >= 1<<(8*rest) {
			return netip.Addr{}, true, false
		}
		if i < len(parts)-1 {
			v |= n << (8 * (3 - uint(i)))
		} else {
			v |= n
		}
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true, true
}

// endsInNumber: all ASCII digits, or 0x followed by hex digits (possibly none).
func endsInNumber(label string) bool {
	if s, ok := cutHexPrefix(label); ok {
		return strings.Trim(s, "0123456789abcdefABCDEF") == ""
	}
	return strings.Trim(label, "0123456789") == ""
}

// ipv4Part reads one label: 0x hex, a leading 0 octal, else decimal.
func ipv4Part(s string) (uint64, bool) {
	if s == "" || len(s) > 12 { // 12 characters hold every value that fits; longer is invalid
		return 0, false
	}
	base := 10
	if h, ok := cutHexPrefix(s); ok {
		if h == "" {
			return 0, true
		}
		s, base = h, 16
	} else if len(s) > 1 && s[0] == '0' {
		s, base = s[1:], 8
	}
	n, err := strconv.ParseUint(s, base, 64)
	return n, err == nil
}

func cutHexPrefix(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		return s[2:], true
	}
	return s, false
}
