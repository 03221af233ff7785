package config

// How a config file's values are read and checked beyond their Go types: durations and counts
// as written, levels the logger and Envoy know, and decoding errors said in the file's terms
// (key paths and YAML kinds) instead of the decoders' Go types.

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"go.yaml.in/yaml/v3"

	"github.com/tollway/tollway/extproc/x402"
	"github.com/tollway/tollway/xds/ir"
)

// maxEnvoyWorkers bounds envoy.concurrency: a typo such as 80000 would start that many threads.
const maxEnvoyWorkers = 1024

// envoyLogLevels are the values Envoy's --log-level takes.
var envoyLogLevels = []string{"trace", "debug", "info", "warning", "warn", "error", "critical", "off"}

// checkValues checks what the types do not: levels and durations.
func (c *Config) checkValues() []error {
	var errs []error
	if err := new(slog.Level).UnmarshalText([]byte(strings.ToUpper(c.Log.Level))); err != nil {
		errs = append(errs, fmt.Errorf("log.level is %q: use debug, info, warn or error", c.Log.Level))
	}
	if a := c.Log.Access; a != "stdout" && a != "stderr" && a != "off" && !filepath.IsAbs(a) {
		errs = append(errs, fmt.Errorf("log.access is %q: use stdout, stderr, off, or a file's absolute path", a))
	}
	if l := c.Envoy.LogLevel; l != "" && !slices.Contains(envoyLogLevels, l) {
		errs = append(errs, fmt.Errorf("envoy.log_level is %q: use trace, debug, info, warning, error, critical or off", l))
	}
	if n := c.Envoy.Concurrency; n < 0 || n > maxEnvoyWorkers {
		errs = append(errs, fmt.Errorf("envoy.concurrency is %d: use 0 (one Envoy worker per CPU Tollway may use, the default) or a number of workers from 1 to %d", n, maxEnvoyWorkers))
	}
	for key, d := range map[string]time.Duration{"envoy.drain_timeout": c.Envoy.DrainTimeout, "routing.attempt_timeout": c.Routing.AttemptTimeout} {
		switch {
		case d < 0:
			errs = append(errs, fmt.Errorf("%s is %v: it must not be negative", key, d))
		case d > 0 && d < time.Millisecond:
			errs = append(errs, fmt.Errorf("%s is %v: Envoy counts milliseconds, use 1ms or more (or 0 for the default)", key, d))
		}
	}
	return errs
}

// Bounds of tasks.max_age and tasks.unknown_grace.
const (
	maxTaskAge      = 30 * 24 * time.Hour // Kling, the longest keeper, drops results after 30 days
	maxUnknownGrace = time.Hour
)

// checkTasks checks the media tasks' time limits.
func (c *Config) checkTasks() []error {
	var errs []error
	if d := c.Tasks.MaxAge; d < time.Second || d > maxTaskAge {
		errs = append(errs, fmt.Errorf("tasks.max_age is %v: give a duration from 1s to %v, e.g. 6h (the default): a task its provider has not finished by then fails with task_timeout", d, maxTaskAge))
	}
	if d := c.Tasks.UnknownGrace; d < time.Second || d > maxUnknownGrace {
		errs = append(errs, fmt.Errorf("tasks.unknown_grace is %v: give a duration from 1s to %v, e.g. 1m (the default): a task its provider says it does not know for that long fails with task_expired_or_unknown", d, maxUnknownGrace))
	}
	return errs
}

// strictValues is a decode hook: a duration must be written with its unit (a bare number would
// be nanoseconds) and a count must be a whole number (1.5 would silently be 1).
func strictValues(from, to reflect.Type, data any) (any, error) {
	switch {
	case to == reflect.TypeFor[time.Duration]():
		s, ok := data.(string)
		if !ok {
			if from.Kind() >= reflect.Int && from.Kind() <= reflect.Float64 {
				return nil, fmt.Errorf("is the number %v: write a duration with its unit, such as %vs", data, data)
			}
			return data, nil // the decoder reports the wrong kind
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("is %q: write a duration such as 30s or 500ms", s)
		}
		return d, nil
	case to.Kind() >= reflect.Int && to.Kind() <= reflect.Uint64:
		if f, ok := data.(float64); ok && f != float64(int64(f)) {
			return nil, fmt.Errorf("is %v: write a whole number", f)
		}
	case to.Kind() == reflect.String:
		// A number YAML reads as a float would reach a text field through a float (0.1 is not
		// exact): prices and the like must be quoted.
		if f, ok := data.(float64); ok {
			return nil, fmt.Errorf("is the number %v: quote it (\"%v\") so it is read exactly as written", f, f)
		}
	}
	return data, nil
}

// gotKind is mapstructure's "expected a map or struct, got <Go kind>".
var gotKind = regexp.MustCompile(`^expected a map or struct, got "(\w+)"$`)

var kindWords = map[string]string{
	"string": "text", "bool": "true or false", "slice": "a list", "int": "a number", "int64": "a number",
	"uint64": "a number", "float64": "a number", "invalid": "empty",
}

// yamlLine is a line of a YAML decoding error, "line 3: cannot unmarshal ...".
var yamlLine = regexp.MustCompile(`^\s*(line \d+): cannot unmarshal`)

// configError says err, from reading or decoding the file, in the file's terms.
func configError(err error) error {
	if strings.Contains(err.Error(), "yaml: invalid map key: ") { // the key's Go value follows
		return errors.New("yaml: a mapping key must be plain text (quote it), not a list or mapping")
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			lines[i] = e
			if m := yamlLine.FindStringSubmatch(e); m != nil {
				lines[i] = m[1] + ": the file must be a mapping of keys (listen:, store:, providers:, models:, routes:), with plain keys"
			}
		}
		return errors.New(strings.Join(lines, "\n"))
	}
	var problems []string
	decodeProblems(err, &problems)
	if len(problems) == 0 {
		return err
	}
	return errors.New(strings.Join(problems, "\n"))
}

// decodeProblems collects one line per mapstructure decoding error under err.
func decodeProblems(err error, out *[]string) {
	var de *mapstructure.DecodeError
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			decodeProblems(e, out)
		}
		return
	case *mapstructure.DecodeError:
		de = u
	default:
		if next := errors.Unwrap(err); next != nil {
			decodeProblems(next, out)
		}
		return
	}
	var inner *mapstructure.DecodeError
	if errors.As(de.Unwrap(), &inner) {
		decodeProblems(de.Unwrap(), out)
		return
	}
	key := de.Name()
	var conv *mapstructure.UnconvertibleTypeError
	var parse *mapstructure.ParseError
	msg := de.Unwrap().Error()
	switch {
	case errors.As(de.Unwrap(), &conv):
		msg = fmt.Sprintf("%s must be %s, not %s", key, wants(conv.Expected.Type()), yamlKind(conv.Value))
	case errors.As(de.Unwrap(), &parse):
		msg = fmt.Sprintf("%s is %q: write %s", key, fmt.Sprint(parse.Value), wants(parse.Expected.Type()))
	case strings.HasPrefix(msg, "has invalid keys: ") && (key == "" || key == reflect.TypeFor[Config]().String()): // mapstructure v2.5 names the top level by its type
		msg = "unknown keys at the top level: " + strings.TrimPrefix(msg, "has invalid keys: ")
	case strings.HasPrefix(msg, "has invalid keys: "):
		msg = key + " has unknown keys: " + strings.TrimPrefix(msg, "has invalid keys: ")
	case gotKind.MatchString(msg):
		msg = fmt.Sprintf("%s must be a mapping (key: value), not %s", key, kindWords[gotKind.FindStringSubmatch(msg)[1]])
	default:
		msg = key + " " + msg // strictValues' own words
	}
	*out = append(*out, msg)
}

func wants(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "a duration such as 30s or 500ms"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return "a list"
	case t.Kind() == reflect.Map || t.Kind() == reflect.Struct:
		return "a mapping (key: value)"
	}
	return "another kind of value"
}

func yamlKind(v any) string {
	switch t := v.(type) {
	case nil:
		return "empty"
	case string:
		return fmt.Sprintf("the text %q", t)
	case bool:
		return fmt.Sprintf("%v", t)
	case int, int64, uint64, float64:
		return fmt.Sprintf("the number %v", t)
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a mapping"
	}
	return "another kind of value"
}

// payTargets are the business APIs a paid endpoint may run.
var payTargets = []string{"/v1/chat/completions", "/v1/videos", "/v1/images"}

// checkX402 checks the x402: section beyond its own rules: what it runs must exist here.
func (c *Config) checkX402() []error {
	var errs []error
	if c.X402.FacilitatorTimeout == 0 { // x402 reads 0 as its default; here the default is written out
		errs = append(errs, fmt.Errorf("x402.facilitator_timeout is 0s: use %v to %v (default %v); it bounds each call to the facilitator", x402.MinFacilitatorTimeout, x402.MaxFacilitatorTimeout, x402.DefaultTimeout))
	}
	if err := c.X402.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(c.X402.Endpoints) == 0 {
		return errs
	}
	if !c.Billing.Enabled {
		errs = append(errs, errors.New("x402.endpoints need billing: {enabled: true}: paid requests are metered, settled and recorded like keyed ones"))
	}
	models := map[string]bool{}
	for _, m := range c.Models {
		models[m.ID] = true
	}
	for i, e := range c.X402.Endpoints {
		if !slices.Contains(payTargets, e.Target) {
			errs = append(errs, fmt.Errorf("x402.endpoints[%d].target %q: a paid endpoint runs one of %s", i, e.Target, strings.Join(payTargets, ", ")))
		}
		for _, m := range e.Models {
			if !models[m] {
				errs = append(errs, fmt.Errorf("x402.endpoints[%d].models: %q is not a model of this configuration", i, m))
			}
		}
	}
	return errs
}

// AccessLog is log.access as the IR takes it (Validate checked it).
func (c *Config) AccessLog() ir.AccessLog {
	switch c.Log.Access {
	case "off":
		return ir.AccessLog{Off: true}
	case "stderr":
		return ir.AccessLog{Path: "/dev/stderr", Bills: c.Billing.Enabled}
	case "stdout", "":
		return ir.AccessLog{Bills: c.Billing.Enabled}
	}
	return ir.AccessLog{Path: c.Log.Access, Bills: c.Billing.Enabled}
}
