package ir

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Bounds on the identifiers a catalog holds. They reach Envoy cluster names, request headers
// (x-tollway-cluster, x-tollway-model, x-tollway-removed-params) and bbolt keys, and come from
// the admin API as well as the file, so each is bounded and header-safe.
const (
	MaxModelIDLength   = 256 // catalog ids and upstream model names (Bedrock ARNs are ~100)
	MaxRouteNameLength = 128
	MaxNameLength      = 256 // display names
	MaxListLength      = 64  // entries of a catalog list (parameters, modalities, features, a route's models)
	maxQuoted          = 64  // characters of a value a message repeats
)

var (
	// modelIDRE admits real ids: meta-llama/Llama-3.3-70B-Instruct, claude-3-5-sonnet@20240620,
	// gemini-2.5-flash, openai/gpt-4o:free, llama3.2.
	modelIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`)
	// tokenRE is a parameter, modality or feature name: temperature, top_p, image, tools.
	tokenRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
)

// CheckProviderName says what is wrong with a provider name, nil when nothing is.
func CheckProviderName(name string) error {
	if !nameRE.MatchString(name) {
		return errors.New("name must be lowercase letters, digits, '-' or '_' (max 63)")
	}
	return nil
}

// QuoteShort quotes s for a message, cut to its first characters when long, so a hostile value
// is never echoed whole.
func QuoteShort(s string) string {
	if r := []rune(s); len(r) > maxQuoted {
		return strconv.Quote(string(r[:maxQuoted])) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// The checks below return plain messages for callers to place (a config entry, a request
// field); Validate adds ErrInvalid.

// CheckModelID says what is wrong with a catalog model id, nil when nothing is.
func CheckModelID(id string) error {
	switch {
	case id == "":
		return errors.New("a model id is required, e.g. gpt-4o-mini")
	case len(id) > MaxModelIDLength:
		return fmt.Errorf("the id is longer than %d bytes", MaxModelIDLength)
	case strings.HasPrefix(id, RoutePrefix):
		return fmt.Errorf("the id must not start with %s (that prefix names routes)", RoutePrefix)
	case !modelIDRE.MatchString(id):
		return errors.New("the id may hold only letters, digits and . _ : / @ + -, starting with a letter or digit (e.g. meta-llama/Llama-3.3-70B-Instruct)")
	}
	return nil
}

// CheckModelRef checks a reference to a model or a route (route:<slug>), as a key's allow-list
// holds them.
func CheckModelRef(ref string) error {
	if slug, ok := strings.CutPrefix(ref, RoutePrefix); ok {
		if slug == "" || Slug(slug) != slug {
			return fmt.Errorf("route id %s must be route:<lowercase letters, digits and ->, e.g. route:support-bot", QuoteShort(ref))
		}
		return nil
	}
	return CheckModelID(ref)
}

// checkUpstreamModel checks a provider's name for a model: any printable text without spaces.
func checkUpstreamModel(name string) error {
	switch {
	case name == "":
		return errors.New("the upstream model name (model:) is required")
	case len(name) > MaxModelIDLength:
		return fmt.Errorf("upstream model name %s is longer than %d bytes", QuoteShort(name), MaxModelIDLength)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("upstream model name %s must not contain spaces or control characters", QuoteShort(name))
	}
	return nil
}

// CheckText checks a free-text name (a display name, a route name): bounded, printable. what
// names the value in the message ("" when the caller names it).
func CheckText(what, s string, max int) error {
	subject := strings.TrimSpace(what + " " + QuoteShort(s))
	if len(s) > max {
		return fmt.Errorf("%s is longer than %d bytes", subject, max)
	}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) >= 0 {
		return fmt.Errorf("%s must not contain control characters", subject)
	}
	return nil
}

// checkTokens checks a list of parameter, modality or feature names.
func checkTokens(what string, list []string) error {
	if len(list) > MaxListLength {
		return fmt.Errorf("%s has %d entries, at most %d", what, len(list), MaxListLength)
	}
	for _, s := range list {
		if !tokenRE.MatchString(s) {
			return fmt.Errorf("%s: %s must be 1-64 letters, digits, _ . or -, e.g. temperature", what, QuoteShort(s))
		}
	}
	return nil
}
