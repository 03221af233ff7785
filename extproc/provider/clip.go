package provider

import "unicode/utf8"

// Clip shortens a client's value for a message: s cut to at most n bytes, at a character
// boundary, and "..." when it was cut. A hostile value is never echoed whole, and a message
// (JSON, in UTF-8) never carries half a character.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Cut(s, n) + "..."
}

// Cut cuts s to at most n bytes, at a character boundary.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
